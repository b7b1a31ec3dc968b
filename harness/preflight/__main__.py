import sys

from harness.preflight.cli import main

sys.exit(main())
