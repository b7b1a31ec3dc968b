"""The fuzz campaign's paths (issue 54): every option and argument of every command that takes a
path, found by walking the real parsers, refuses an empty path and one longer than the system
takes while parsing (ENAMETOOLONG made `infer`, `compare`, `merge` and `accuracy` end in an
OSError traceback); paths of the wrong kind (a device, a FIFO, a folder where a file goes, a
file where a folder goes) found by the campaign are one line, exit 2. No server: the commands
are given an address nothing listens on, and each refusal comes before it is asked."""

import argparse
import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from harness.cli import build_parser
from tests.commands import harness
from tests.conftest import copy_photos
from tests.test_fuzz_options import commands, parse, positionals

LONG = "/tmp/" + "a" * 300
UNREACHABLE = ("--url", "127.0.0.1:1")


def path_options():
    """(command words, option or argument name, its action) of every value parsed as a Path."""
    for words, parser in commands(build_parser()):
        for action in parser._actions:
            if action.type is Path and not getattr(action, "deprecated", False):
                yield words, (action.option_strings or [action.dest])[-1], action


PATHS = sorted({(words, name) for words, name, _ in path_options()})


def test_every_command_taking_a_path_is_found():
    found = {" ".join(words) for words, _ in PATHS}
    assert {"check", "deploy", "accuracy", "merge", "compare", "infer", "preflight", "watch", "repo build"} <= found
    assert len(PATHS) >= 60


@pytest.mark.parametrize("value, message", [("", "an empty path"), (LONG, "a path longer than the system takes")])
def test_an_empty_or_overlong_path_is_refused_while_parsing(value, message):
    parsers = dict(commands(build_parser()))
    for words, name in PATHS:
        sub = parsers[words]
        if name.startswith("-"):
            status, err = parse(words, [name, value])
        else:  # a positional: this value in its place, the others ordinary
            values = positionals(sub)
            order = [a.dest for a in sub._actions if not a.option_strings and a.required and
                     not isinstance(a, argparse._SubParsersAction)]
            values[order.index(name)] = value
            status, err = parse(words, values, fill=False)
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and message in lines[0], (words, name, err)


@pytest.fixture
def kinds(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("hello\n")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (("accuracy", "/dev/null", *UNREACHABLE), "neither a folder nor a file"),
    (("accuracy", "{fifo}", *UNREACHABLE), "neither a folder nor a file"),
    (("accuracy", "{folder}", "--class-names", "{folder}", *UNREACHABLE), "not a regular file (a directory)"),
    (("merge", "/dev/null", "--report", "{out}"), "not a folder"),
    (("merge", "{file}", "--report", "{out}"), "not a folder"),
    (("preflight", "--manifest", "{folder}", *UNREACHABLE), "not a regular file (a directory)"),
], ids=["dataset-device", "dataset-fifo", "class-names-folder", "shard-device", "shard-file", "manifest-folder"])
def test_a_path_of_the_wrong_kind_is_one_line(kinds, args, message):
    """Each was a traceback: NotADirectoryError, IsADirectoryError (exit 1)."""
    names = {"fifo": kinds / "fifo", "folder": kinds / "folder", "file": kinds / "file.txt", "out": kinds / "out"}
    result = harness(*(a.format(**names) if a.startswith("{") else a for a in args))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(lines) == 1 and message in lines[0], result.stderr


@contextlib.contextmanager
def fifo_watch(path: Path):
    """A FIFO at ``path`` and a flag set when something opens it to read: the watcher opens its
    writing end as soon as a reader waits, so a reader (the old code) gets end-of-file instead of
    waiting for ever, and the test fails instead of hanging."""
    os.mkfifo(path)
    opened, done = threading.Event(), threading.Event()

    def watch():
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader
                time.sleep(0.05)
                continue
            opened.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        done.set()
        thread.join(5)


@pytest.mark.parametrize("option, name", [("--reference-model", "model.onnx"), ("--reference", "training.py:f")])
def test_a_fifo_named_as_the_reference_is_refused_never_read(photos_dir, tmp_path, option, name):
    """check hashed --reference-model before loading it (a FIFO waited for ever, /dev/zero was read
    for ever); a FIFO named FILE.py was imported (read without end)."""
    copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    file, _, attribute = name.partition(":")
    with fifo_watch(tmp_path / file) as opened:
        value = f"{tmp_path / file}:{attribute}" if attribute else tmp_path / file
        result = harness("check", tmp_path / "images", option, value, "--report", tmp_path / "r", *UNREACHABLE)
    assert not opened.is_set(), f"{option} {name}: the FIFO was opened to read"
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_reference_file_with_a_name_too_long_is_one_line(photos_dir, tmp_path):
    images = copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    result = harness("check", images, "--report", tmp_path / "r", "--reference", f"{tmp_path / ('a' * 300)}.py:f", *UNREACHABLE)
    assert result.returncode == 2 and "File name too long" in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
