"""One command-line vocabulary (issue 28): every option of every command is listed, and a name
with two meanings, or a meaning with two spellings, fails; the renamed options' old spellings
warn and still work (real commands too); options come from ``HARNESS_<OPTION>``, the command
line winning; ``--help`` lists the commands as the work goes, with exit statuses and no
Sphinx markup or Python reprs."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from harness.arguments import DeprecatedAlias, environment_name
from harness.cli import COMMAND_ORDER, build_parser
from tests.commands import harness as in_process
from tests.commands import harness_process

DEPRECATED = {
    ("check", "--labels"): "--class-names",
    ("diagnose", "--labels"): "--class-names",
    ("infer", "--labels"): "--class-names",
    ("model import", "--labels"): "--class-names",
    ("accuracy", "--pipelines"): "--pipeline",
    ("layers", "--batch"): "--batch-size",
    ("loadtest", "--out"): "--report",
    ("loadtest", "--workers"): "--locust-workers",
    ("loadtest", "--ensembles"): "--model",
    ("loadtest", "--request-timeout"): "--timeout",
    ("loadtest", "--grpc-url"): "--grpc-port",
}
"""Every old spelling kept for one release: (command, old) -> the new option. It may mean
something else in another command (accuracy's ``--labels`` labels the images): only a live
option has to keep one meaning."""
NARROWED = {"--profile": "repo build writes a profile; serve's as-is serves --repository without building one"}
"""Options whose choices a command narrows (one meaning, fewer values), and why."""


def commands(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()):
    """(command, its parser) of every command, subcommands' own included (``model import``)."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from commands(sub, (*path, name))
                else:
                    yield " ".join((*path, name)), sub


def deprecated(action: argparse.Action) -> bool:
    return getattr(action, "deprecated", False)


def options(live: bool = True):
    """(command, action) of every option of every command: the live ones, or the deprecated."""
    for command, parser in commands():
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction) and deprecated(action) != live:
                yield command, action


def meaning(action: argparse.Action) -> tuple:
    """What an option means, as far as a parser can tell: where it goes, its type, its choices,
    whether it takes a value (repeatable or not is the same meaning: ``--model``). A type that is
    an object (``Whole(1, 64)``) means its class: a command's own bounds narrow a number, as choices do."""
    kind = getattr(action.type, "__qualname__", None) or (type(action.type).__qualname__ if action.type else None)
    return action.dest, kind, tuple(action.choices) if action.choices is not None else None, action.nargs == 0


def test_every_option_name_has_one_meaning():
    seen: dict[str, dict[tuple, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, action in options():
        for option in action.option_strings:
            seen[option][meaning(action)].append(command)
    two = {}
    for option, meanings in seen.items():
        if len(meanings) == 1:
            continue
        if option in NARROWED and len({m[:2] + m[3:] for m in meanings}) == 1:
            choices = sorted((set(m[2]) for m in meanings), key=len)
            if all(a <= b for a, b in zip(choices, choices[1:])):
                continue
        two[option] = {str(m): c for m, c in meanings.items()}
    assert not two, f"one name, two meanings: {json.dumps(two, indent=1)}"


def test_every_meaning_has_one_spelling():
    spellings: dict[str, dict[tuple, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, action in options():
        spellings[action.dest][tuple(sorted(action.option_strings))].append(command)
    two = {dest: {" ".join(k): v for k, v in found.items()} for dest, found in spellings.items() if len(found) > 1}
    assert not two, f"one meaning, two spellings: {json.dumps(two, indent=1)}"


def test_the_old_spellings_are_the_registered_ones_and_hidden():
    found = {}
    for command, action in options(live=False):
        for option in action.option_strings:
            found[command, option] = action
    assert set(found) == set(DEPRECATED)
    parsers = dict(commands())
    for (command, old), new in DEPRECATED.items():
        live = {o: a for a in parsers[command]._actions if not deprecated(a) for o in a.option_strings}
        assert new in live, (command, old, new)
        assert old not in live  # one spelling per command
        if isinstance(found[command, old], DeprecatedAlias):
            assert found[command, old].dest == live[new].dest
        assert not re.search(rf"(?<![\w-]){old}(?![\w-])", parsers[command].format_help())  # hidden from the help
        assert environment_name(found[command, old]) is None  # no HARNESS_ variable of its own


def parse(argv) -> dict:
    """The parsed options (not the command's function: one per parser built)."""
    return {k: v for k, v in vars(build_parser().parse_args(argv)).items() if k != "run"}


ALIASES = [
    (["check", "I", "--labels", "c.txt"], ["check", "I", "--class-names", "c.txt"]),
    (["diagnose", "I", "--labels", "c.txt"], ["diagnose", "I", "--class-names", "c.txt"]),
    (["infer", "I", "--labels", "c.txt"], ["infer", "I", "--class-names", "c.txt"]),
    (["model", "import", "m.onnx", "--labels", "c.txt"], ["model", "import", "m.onnx", "--class-names", "c.txt"]),
    (["accuracy", "D", "--pipelines", "dali", "opencv"], ["accuracy", "D", "--pipeline", "dali", "--pipeline", "opencv"]),
    (["infer", "I", "--pipeline", "both"], ["infer", "I", "--pipeline", "dali", "--pipeline", "opencv"]),
    (["layers", "I", "--batch", "2"], ["layers", "I", "--batch-size", "2"]),
    (["loadtest", "--out", "r"], ["loadtest", "--report", "r"]),
    (["loadtest", "--workers", "2"], ["loadtest", "--locust-workers", "2"]),
    (["loadtest", "--ensembles", "a", "b"], ["loadtest", "--model", "a", "--model", "b"]),
    (["loadtest", "--request-timeout", "5"], ["loadtest", "--timeout", "5"]),
]


@pytest.mark.parametrize("old,new", ALIASES, ids=[" ".join(old) for old, _ in ALIASES])
def test_an_old_spelling_warns_and_does_what_the_new_one_does(capsys, old, new):
    assert parse(old) == parse(new)
    err = capsys.readouterr().err
    spelled = next(o for o in old if o.startswith("--"))
    assert f"warning: harness {old[0]}" in err and "deprecated and goes in the next release" in err
    assert spelled in err and err.count("\n") == 1


def test_the_load_tests_old_url_reads_as_before_with_a_warning(capsys):
    """loadtest's --url was the HTTP endpoint; it is the --protocol endpoint now, as everywhere.
    For one release a --url without --protocol (or with a scheme) keeps its old reading."""
    from harness.cli import loadtest  # noqa: F401
    from loadtest.sweep import add_arguments, endpoints_of
    from loadtest.triton import Endpoints

    def endpoints(*argv):
        parser = argparse.ArgumentParser()
        groups = add_arguments(parser)
        return endpoints_of(groups.parse(parser.parse_args(list(argv))).server)

    old = endpoints("--url", "h:9000", "--grpc-url", "h:9001", "--metrics-url", "http://h:9002/metrics")
    assert old == Endpoints("h:9000", "h:9001", "http://h:9002/metrics")
    err = capsys.readouterr().err
    assert "--url without --protocol is read as the HTTP endpoint" in err and "--grpc-url is deprecated" in err
    assert endpoints("--url", "h:9000", "--protocol", "http", "--grpc-port", "9001",
                     "--metrics-url", "http://h:9002/metrics") == old
    assert endpoints("--url", "h:9001", "--protocol", "grpc", "--http-port", "9000",
                     "--metrics-url", "http://h:9002/metrics") == old
    assert capsys.readouterr().err == ""
    assert endpoints("--url", "http://triton") == Endpoints.from_url("http://triton")  # a scheme: as before
    assert "--url http://HOST:PORT is deprecated" in capsys.readouterr().err
    assert endpoints("--url", "triton:8001", "--protocol", "grpc") == Endpoints.from_url("triton:8000")
    assert endpoints() is None  # no --url: the embedded server


def test_fail_on_takes_one_set_of_choices_and_accuracy_says_what_close_means():
    from harness.verdict import FAIL_ON, ties_fail

    helps = {command: action.help for command, action in options() if action.dest == "fail_on"}
    assert set(helps) == {"check", "compare", "accuracy"}
    assert "close fails on what tie fails on" in helps["accuracy"]
    assert FAIL_ON == ("diverged", "tie", "close") and [ties_fail(f) for f in FAIL_ON] == [False, True, True]


def test_repeat_takes_only_the_repositorys_pipelines(capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["repeat", "I", "--pipeline", "tensorrt"])
    assert refused.value.code == 2 and "invalid choice: 'tensorrt'" in capsys.readouterr().err


def test_the_task_names_are_the_tasks(capsys):
    """``--task`` takes the one registry's names (harness.task.TASKS), and refuses others naming them."""
    from harness.task import TASKS

    assert build_parser().parse_args(["check", "I", "--task", "embedding"]).task == "embedding"
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["check", "I", "--task", "keypoints"])
    assert refused.value.code == 2 and f"tasks: {', '.join(TASKS)}" in capsys.readouterr().err


# --- the environment ---

def test_an_option_comes_from_the_environment_and_the_command_line_wins(monkeypatch):
    for name, value in {"HARNESS_URL": "e:1", "HARNESS_PROTOCOL": "http", "HARNESS_TIMEOUT": "7.5",
                        "HARNESS_SPEC": "env.toml", "HARNESS_FAIL_ON": "tie", "HARNESS_RESUME": "yes",
                        "HARNESS_NO_ISOLATE": "0", "HARNESS_STAGE": "a=crop b=none", "HARNESS_FORMAT": "md,junit",
                        "HARNESS_CLIENTS": "1 2", "HARNESS_MODEL": "m1 m2", "HARNESS_CLASS_NAMES": "names.txt",
                        "HARNESS_LABELS": "labels.csv"}.items():
        monkeypatch.setenv(name, value)
    check = parse(["check", "I"])
    assert (check["url"], check["protocol"], check["timeout"], check["spec"]) == ("e:1", "http", 7.5, Path("env.toml"))
    assert (check["fail_on"], check["resume"], check["isolate"]) == ("tie", True, True)
    assert check["stage"] == ["a=crop", "b=none"] and check["formats"] == ("md", "junit")
    assert check["class_names"] == Path("names.txt") and check["model"] == "m1 m2"  # check takes one model
    given = parse(["check", "I", "--url", "c:2", "--protocol", "grpc", "--fail-on", "close", "--stage", "c=input",
                   "--format", "json", "--class-names", "mine.txt"])
    assert (given["url"], given["protocol"], given["fail_on"]) == ("c:2", "grpc", "close")
    assert given["stage"] == ["c=input"] and given["formats"] == ("json",) and given["class_names"] == Path("mine.txt")
    accuracy = parse(["accuracy", "D"])
    assert accuracy["model"] == ["m1", "m2"] and accuracy["labels"] == Path("labels.csv")  # the images' labels
    assert parse(["accuracy", "D", "--model", "x"])["model"] == ["x"]
    assert parse(["loadtest"])["clients"] == [1, 2]
    assert parse(["model", "import", "m.onnx"])["class_names"] == Path("names.txt")  # a required option too


@pytest.mark.parametrize("name,value,expected", [
    ("HARNESS_FAIL_ON", "never", "HARNESS_FAIL_ON='never': invalid choice: 'never'"),
    ("HARNESS_TIMEOUT", "soon", "HARNESS_TIMEOUT='soon': must be a number, got 'soon'"),
    ("HARNESS_RESUME", "maybe", "HARNESS_RESUME='maybe': a flag takes 1, true, yes, on or 0, false, no, off"),
])
def test_a_bad_value_in_the_environment_is_a_usage_error_naming_it(monkeypatch, capsys, name, value, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["check", "I"])
    assert refused.value.code == 2 and expected in " ".join(capsys.readouterr().err.split())


# --- help ---

def test_help_lists_the_commands_as_the_work_goes(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.split("exit status:")[0].splitlines()
              if re.match(r"^    [a-z]", line)]
    assert listed == list(COMMAND_ORDER)
    steps = ["model", "corpus", "repo", "serve", "check", "compare", "merge", "diagnose", "accuracy", "train",
             "preflight", "layers", "repeat", "loadtest"]
    assert [c for c in COMMAND_ORDER if c in steps] == steps
    assert "  2  usage or setup error" in text and "HARNESS_<OPTION>" in text


def test_every_commands_help_has_its_exit_statuses_and_plain_defaults():
    for command, parser in commands():
        text = parser.format_help()
        epilog = text.split("exit status:\n", 1)
        assert len(epilog) == 2 and "  0  " in epilog[1] and "  2  " in epilog[1], command
        assert "HARNESS_<OPTION>" in epilog[1], command
        assert "Exit status" not in (parser.description or ""), command
        for bad in ("``", ":mod:", ":class:", ":func:", "['", "('"):
            assert bad not in text, (command, bad)
        for action in parser._actions:
            if action.help in (None, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
                continue
            help = parser._get_formatter()._expand_help(action)
            assert not re.findall(r"\(default(?!: )|(?<!\()default: ", help), (command, action.option_strings, help)
            stated = action.default in (None, False) or isinstance(action, argparse._StoreFalseAction)
            assert stated or action.required or "(default: " in help, (command, action.option_strings, help)


def test_the_positional_arguments_say_what_they_are():
    for command, parser in commands():
        for action in parser._actions:
            if not action.option_strings:
                assert action.help and action.metavar, (command, action.dest)


# --- real commands ---

def harness(*args, env=None, timeout=300):
    """A subprocess: the environment it reads options from is its own."""
    return harness_process(*args, env={**os.environ, **(env or {})}, timeout=timeout)


def test_infer_with_old_spellings_and_with_the_environment(server, photos_dir, tmp_path):
    names = tmp_path / "classes.txt"
    names.write_text("".join(f"class {i}\n" for i in range(1000)))
    old = in_process("infer", photos_dir / "orange.jpg", "--pipeline", "both", "--labels", names, "--url", server.grpc_url)
    assert old.returncode == 0, old.stderr
    assert "classify_dali" in old.stdout and "classify_opencv" in old.stdout and "orange" in old.stdout
    assert "--pipeline both is deprecated" in old.stderr and "--labels is deprecated" in old.stderr
    from_env = harness("infer", photos_dir / "orange.jpg", env={"HARNESS_URL": server.http_url,
                                                               "HARNESS_PROTOCOL": "http"})
    assert from_env.returncode == 0 and "orange" in from_env.stdout, from_env.stderr
    assert "embedded Triton server" not in from_env.stderr  # the server of HARNESS_URL answered
    beaten = harness("infer", photos_dir / "orange.jpg", "--url", server.grpc_url, "--protocol", "grpc",
                     env={"HARNESS_URL": "127.0.0.1:9", "HARNESS_PROTOCOL": "http"})
    assert beaten.returncode == 0 and "orange" in beaten.stdout, beaten.stderr
    refused = harness("check", photos_dir, env={"HARNESS_FAIL_ON": "never"})
    assert refused.returncode == 2 and "HARNESS_FAIL_ON" in refused.stderr


def test_a_load_test_with_every_old_spelling_runs_as_before(server, tmp_path):
    run = subprocess.run([sys.executable, "-m", "loadtest.sweep", "--url", server.http_url, "--grpc-url",
                          server.grpc_url, "--metrics-url", server.metrics_url, "--ensembles", "classify_dali",
                          "--request-timeout", "30", "--workers", "0", "--clients", "1", "--protocols", "grpc",
                          "--warmup", "0", "--duration", "1", "--out", tmp_path, "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for old in ("--url without --protocol", "--grpc-url", "--ensembles", "--request-timeout", "--workers", "--out"):
        assert f"{old} is " in run.stderr, old
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["server"] == {"http": server.http_url, "grpc": server.grpc_url, "metrics": server.metrics_url,
                                 "embedded_cpu_profile": False}
    assert results["config"]["ensembles"] == ["classify_dali"] and results["config"]["request_timeout"] == 30.0
    assert results["points"][0]["stats"]["requests"] > 0
