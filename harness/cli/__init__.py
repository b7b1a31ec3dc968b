"""``harness``: the command line. Each command module registers its subcommands.

Exit status: 0 success; 1 the check found what ``--fail-on`` forbids (or some images
failed); 2 usage or setup errors (bad arguments, missing files, server not reachable).
"""

from __future__ import annotations

import argparse
import sys

from harness.cli import accuracy, check, diagnose, loadtest, preflight, serving, train
from harness.cli.common import fail
from harness.errors import UsageError

COMMAND_MODULES = (serving, check, loadtest, diagnose, accuracy, train, preflight)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Serve a DALI/OpenCV Triton ensemble and check it against training-time preprocessing.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from harness.model import ModelError
    from harness.repository import RepositoryError
    from harness.server import ServerError
    from harness.spec import SpecError

    try:
        return args.run(args)
    except (UsageError, SpecError, ModelError, RepositoryError, ServerError, FileNotFoundError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted")


if __name__ == "__main__":
    sys.exit(main())
