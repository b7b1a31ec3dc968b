"""``harness preflight``: the first command on a GPU host (see :mod:`harness.preflight`)."""

from __future__ import annotations

from harness.preflight.cli import DESCRIPTION, EPILOG, add_arguments, run


def register(commands) -> None:
    parser = commands.add_parser(
        "preflight", help="check a deployment against the production manifest and the recorded known answers",
        description=DESCRIPTION, epilog=EPILOG)
    groups = add_arguments(parser)
    parser.set_defaults(run=lambda args: run(args, groups))
