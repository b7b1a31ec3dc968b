"""Every default a command writes to is under the folder it runs in, never the tool's own checkout
(a report, a server's log, a watch's known answers, a trained model, photos, wheels)."""

import argparse
from pathlib import Path

from harness.cli import build_parser
from harness.paths import PROJECT_ROOT

WRITTEN = {"--report", "--log-file", "--known-answers", "--out", "--variants-out", "--serve-repository"}
READ = {("preflight", "--known-answers")}
"""Defaults that are read, not written: preflight holds a server to the project's own record."""


def commands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*prefix, name))
    yield " ".join(prefix), parser


def test_every_default_that_writes_is_relative_to_the_working_folder():
    written = {}
    for command, parser in commands(build_parser()):
        for action in parser._actions:
            names = set(action.option_strings) & WRITTEN
            if names and isinstance(action.default, Path) and (command, min(names)) not in READ:
                written[f"{command} {min(names)}"] = action.default
    assert {"check --report", "serve --log-file", "watch --known-answers", "deploy --report"} <= set(written)
    absolute = {k: v for k, v in written.items() if v.is_absolute() or str(v).startswith(str(PROJECT_ROOT))}
    assert not absolute
