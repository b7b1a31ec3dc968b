"""The errors a command ends with, and the one policy mapping them to an exit status.

Exit status, for every command: 0 success; 1 the run found what it was asked to fail on
(a divergence, a flip, an image rejected by one side only); 2 usage or setup errors (bad
arguments, missing files, a spec or model the harness refuses, a server not reachable or
that stopped answering, nothing could be compared).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or setup: the command exits with status 2 and this message."""
