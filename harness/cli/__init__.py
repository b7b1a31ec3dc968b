"""``harness``: the command line. Each command module registers its subcommands, parses
its arguments, calls the library and prints.

Exit status, for every command (the policy: :mod:`harness.errors`): 0 nothing the options
forbid was found; 1 it was (a divergence, a flip, an image rejected by one side only); 2
usage or setup errors, the server not reachable or stopped, nothing could be compared.
"""

from __future__ import annotations

import argparse
import sys

from harness.cli import accuracy, check, diagnose, layers, loadtest, preflight, serving, train
from harness.cli.common import console
from harness.errors import ERROR_STATUS, run_command, terminate_as_interrupt
from harness.names import terminal_text

COMMAND_MODULES = (serving, check, loadtest, diagnose, accuracy, train, preflight, layers)


class ArgumentParser(argparse.ArgumentParser):
    """Usage errors in one line (``error: <command>: <what>``), exit status 2, as every other
    refusal of the harness; ``--help`` shows the usage."""

    def error(self, message: str):
        console.print(f"[bold red]error:[/] {terminal_text(self.prog)}: {terminal_text(message)} "
                      f"(see {terminal_text(self.prog)} --help)", soft_wrap=True, markup=True)
        self.exit(ERROR_STATUS)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="harness",
        description="Serve a DALI/OpenCV Triton ensemble and check it against training-time preprocessing.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    terminate_as_interrupt()  # SIGTERM unwinds like Ctrl-C: embedded servers stopped, build folders removed
    args = build_parser().parse_args(argv)
    return run_command(lambda: args.run(args),
                       lambda message: console.print(f"[bold red]error:[/] {terminal_text(message)}", soft_wrap=True,
                                                     markup=True))


if __name__ == "__main__":
    sys.exit(main())
