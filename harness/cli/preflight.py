"""``harness preflight``: the first command on a GPU host (see :mod:`harness.preflight`)."""

from __future__ import annotations

from harness.preflight.cli import add_arguments, run


def register(commands) -> None:
    parser = commands.add_parser(
        "preflight", help="check a deployment against the production manifest and the recorded known answers",
        description="Versions, DALI schema, engine, known-answer photos through both ensembles and the taps "
                    "model, and bad-image isolation; a pass/fail table and exit status (0 pass, 1 fail, 2 set-up).")
    add_arguments(parser)
    parser.set_defaults(run=run)
