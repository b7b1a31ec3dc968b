"""``harness loadtest``: the Locust sweep of CPU decode vs GPU decode (see loadtest/sweep.py).

Exit status (:mod:`harness.errors`): 0 every point measured and every good photo served its
known answer; 1 a point had no successful request, a wrong or unverified answer, or a good photo
failed; 2 bad arguments, the server, Locust or the metrics unreachable or stopped, nothing
measured at all, or interrupted.
"""

from __future__ import annotations

import argparse

from harness.arguments import Groups, RepositoryArgs
from harness.errors import require
from harness.session import embedded_server
from loadtest import sweep


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "loadtest", help="Locust sweep: QPS and latency of classify_dali vs classify_opencv, server-side breakdown",
        description=sweep.DESCRIPTION, epilog=sweep.epilog())
    groups = sweep.add_arguments(parser)
    # the repository and spec the embedded server serves (without --url)
    repository = Groups(parser, repository=RepositoryArgs())
    parser.set_defaults(run=lambda args: run_loadtest(args, groups, repository))


def run_loadtest(args: argparse.Namespace, groups: Groups, repository: Groups) -> int:
    require("locust")  # Locust runs in a process of its own: say which extra it needs before starting it
    paths = repository.parse(args).repository
    console = sweep.make_console()
    result = sweep.run(sweep.options_from_args(args, groups), console=console,
                       start_server=lambda: embedded_server(paths.repository, paths.spec))
    sweep.print_result(result, console)
    return result.exit_status()
