"""``harness loadtest``: the Locust sweep of CPU decode vs GPU decode (see loadtest/sweep.py)."""

from __future__ import annotations

import argparse

from harness.cli.common import add_repository_args
from harness.session import embedded_server
from loadtest import sweep


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "loadtest", help="Locust sweep: QPS and latency of classify_dali vs classify_opencv, server-side breakdown",
        description=sweep.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_arguments(parser)
    add_repository_args(parser)  # the repository and spec the embedded server serves (without --url)
    parser.set_defaults(run=run_loadtest)


def run_loadtest(args: argparse.Namespace) -> int:
    return sweep.run(args, start_server=lambda: embedded_server(args.repository, args.spec))
