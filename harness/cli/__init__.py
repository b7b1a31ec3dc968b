"""``harness``: the command line. Each command module registers its subcommands with the
argument groups of :mod:`harness.arguments` (one vocabulary: an option means the same in
every command), parses them into typed values, calls the library and prints.

Exit status, for every command (the policy: :mod:`harness.errors`): 0 nothing the options
forbid was found; 1 it was (a divergence, a flip, an image rejected by one side only); 2
usage or setup errors, the server not reachable or stopped, nothing could be compared.
"""

from __future__ import annotations

import argparse
import sys

from harness import arguments
from harness.cli import accuracy, check, deploy, diagnose, layers, loadtest, preflight, serving, train, watch
from harness.cli.common import console
from harness.errors import ERROR_STATUS, run_command, terminate_as_interrupt
from harness.names import terminal_text

COMMAND_MODULES = (serving, deploy, check, loadtest, diagnose, accuracy, train, preflight, layers, watch)
WORK = (("set up", ("model", "corpus", "repo")), ("deploy your model", ("deploy",)),
        ("serve", ("serve", "infer")), ("check", ("check", "compare", "merge")),
        ("diagnose", ("diagnose",)), ("measure the effect", ("accuracy", "train")),
        ("on the GPU host", ("preflight", "layers", "repeat")), ("load", ("loadtest",)),
        ("in production", ("watch",)))
"""The commands in the order of the work, by step: ``harness --help`` lists them so."""
COMMAND_ORDER = tuple(name for _, names in WORK for name in names)


class ArgumentParser(arguments.ArgumentParser):
    """Usage errors in one line (``error: <command>: <what>``), exit status 2, as every other
    refusal of the harness; ``--help`` shows the usage."""

    def error(self, message: str):
        console.print(f"[bold red]error:[/] {terminal_text(self.prog)}: {terminal_text(message)} "
                      f"(see {terminal_text(self.prog)} --help)", soft_wrap=True, markup=True)
        self.exit(ERROR_STATUS)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="harness",
        description="Serve a DALI/OpenCV Triton ensemble and check it against training-time preprocessing. The "
                    "commands, in the order of the work: "
                    + "; ".join(f"{step}: {', '.join(names)}" for step, names in WORK) + ".",
        epilog=arguments.epilog("nothing the options forbid was found", "it was: a divergence, a flip, an image "
                                "rejected by one side only, a check that failed",
                                "usage or setup error, the server not reachable or stopped, nothing could be "
                                "compared, or interrupted", "`harness COMMAND --help` says what each command's "
                                "statuses mean."))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    in_order(commands)
    return parser


def in_order(commands: argparse._SubParsersAction) -> None:
    """List the commands as :data:`COMMAND_ORDER` goes (a command it does not name is a
    mistake: it raises)."""
    missing = set(commands.choices) - set(COMMAND_ORDER)
    if missing:
        raise RuntimeError(f"commands not placed in the order of the work: {', '.join(sorted(missing))}")
    commands._choices_actions.sort(key=lambda action: COMMAND_ORDER.index(action.dest))
    commands.choices = {name: commands.choices[name] for name in COMMAND_ORDER if name in commands.choices}


def main(argv: list[str] | None = None) -> int:
    terminate_as_interrupt()  # SIGTERM unwinds like Ctrl-C: embedded servers stopped, build folders removed
    args = build_parser().parse_args(argv)
    return run_command(lambda: args.run(args),
                       lambda message: console.print(f"[bold red]error:[/] {terminal_text(message)}", soft_wrap=True,
                                                     markup=True))


if __name__ == "__main__":
    sys.exit(main())
