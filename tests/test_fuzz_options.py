"""The fuzz campaign's numbers (issue 54): every option of every command that takes a number,
found by walking the real parsers, is fed hostile values (``nan``, ``inf``, ``1e308``,
negatives, words, a 5,000-digit number) on the command line and through its ``HARNESS_<OPTION>``
variable: each is refused while parsing, exit 2, in one line naming the option, never a
traceback, never a run. No server: a refusal happens before any command starts one."""

import argparse
import ast
import contextlib
import io

import pytest

from harness.arguments import environment_name
from harness.cli import build_parser
from harness.cli.check import shard_arg
from harness.paths import PROJECT_ROOT
from harness.validation import Number, Whole
from tests.commands import harness
from tests.fuzz_files import HOSTILE_NUMBERS, HOSTILE_SHARDS

NUMERIC = (int, float, Whole, Number)


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(command words, parser) of every command and subcommand (``repo build``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*words, name), sub
                yield from commands(sub, (*words, name))


def numeric_options():
    """(command words, option, its action) of every option whose value is a number, or a shard."""
    for words, parser in commands(build_parser()):
        for action in parser._actions:
            if action.option_strings and (action.type in NUMERIC or isinstance(action.type, NUMERIC)
                                          or action.type is shard_arg):
                yield words, action.option_strings[-1], action


def positionals(parser: argparse.ArgumentParser) -> list[str]:
    """A value for each required positional argument: a value the option accepts then parses."""
    return ["X" for a in parser._actions if not a.option_strings and a.required and
            not isinstance(a, argparse._SubParsersAction)]


def parse(words, args, fill: bool = True) -> tuple[int, str]:
    """``harness WORDS POSITIONALS ARGS`` parsed (not run): (exit status, stderr); 0 when accepted.
    ``fill`` False: ``args`` hold the positionals."""
    parser = build_parser()
    sub = dict(commands(parser))[tuple(words)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args([*words, *(positionals(sub) if fill else ()), *args])
        except SystemExit as exc:
            return exc.code, err.getvalue()
    return 0, err.getvalue()


OPTIONS = sorted({(words, option) for words, option, _ in numeric_options()})


def hostile(option_type) -> tuple[str, ...]:
    """The values no number option takes, and 0 where its own bound says 0 is meaningless."""
    if option_type is shard_arg:
        return HOSTILE_SHARDS
    positive = getattr(option_type, "above", None) is not None or (getattr(option_type, "minimum", 0) or 0) > 0
    return HOSTILE_NUMBERS + (("0",) if positive else ())


def test_every_number_option_is_found_and_read_by_the_one_validation():
    found = {(" ".join(words), option) for words, option in OPTIONS}
    assert {("watch", "--interval"), ("check", "--workers"), ("loadtest", "--clients"), ("serve", "--http-port"),
            ("train", "--lr"), ("check", "--timeout"), ("check", "--shard")} <= found and len(found) >= 40
    plain = [f"{' '.join(w)} {o}" for w, o, a in numeric_options() if a.type in (int, float)]
    assert not plain, f"options parsed by int() or float() alone (nan, inf, 1e308 pass): {plain}"


def test_no_parser_anywhere_takes_a_bare_int_or_float():
    """The parsers outside `harness` (loadtest's Locust options, the data generators) too, by their source."""
    bare = []
    for path in [*(PROJECT_ROOT / "harness").rglob("*.py"), *(PROJECT_ROOT / "loadtest").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for keyword in node.keywords:
                    if keyword.arg == "type" and isinstance(keyword.value, ast.Name) and keyword.value.id in ("int", "float"):
                        bare.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")
    assert not bare, bare


@pytest.mark.parametrize("words, option", OPTIONS, ids=[f"{' '.join(w)} {o}" for w, o in OPTIONS])
def test_a_hostile_number_is_refused_while_parsing_in_one_line(monkeypatch, words, option):
    action = next(a for w, o, a in numeric_options() if (w, o) == (words, option))
    for value in hostile(action.type):
        status, err = parse(words, [option, value])
        assert status == 2, f"harness {' '.join(words)} {option} {value!r} was accepted ({status}): {err}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and f"argument {option}:" in lines[0], (value, err)
    name = environment_name(action)
    if name:  # the same value from the environment: the same refusal, naming the variable
        monkeypatch.setenv(name, "nan")
        status, err = parse(words, [])
        assert status == 2 and f"{name}='nan'" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args, message", [
    (("watch", "--interval", "nan"), "argument --interval: must be a finite number, got nan"),
    (("watch", "--interval", "1e308"), "argument --interval: must be at most 86400.0"),
    (("watch", "--interval", "0"), "argument --interval: must be at least 1.0"),
])
def test_the_watch_refuses_an_interval_it_cannot_keep(args, message):
    """`watch --interval nan` ran rounds back to back (23,903 log lines in 15 s), 1e308 ended in
    an OverflowError: refused before anything starts."""
    result = harness(*args, "--once", "--url", "127.0.0.1:1")  # were it taken: one round, nothing reachable
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
