"""The harness command line as the tests run it.

:func:`harness` calls ``harness.cli.main`` in this process, as ``python -m harness`` would
(its stdout, its stderr, its exit status, a traceback as the interpreter prints one), without
paying the interpreter's and the imports' start-up (torch, DALI, OpenCV: about 3 s a run) on
every call. Tests of the process itself (signals, its environment, what a crash prints, its
memory) use :func:`harness_process`, a real ``python -m harness`` subprocess.

Both write the report formats a test reads, not every default one: ``report.html`` (whose
figures cost about 4 s a check) only when the test asks for it (``html=True``) or names
``--format`` itself. Every other file of the default set is written as before; the command
line's own ``HARNESS_FORMAT`` carries the choice, so the command's code path is the user's.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from harness.paths import PROJECT_ROOT
from harness.task import TASKS

HTML_BY_DEFAULT = {"check": "json,md,csv", "compare": "json,md"}
"""The commands whose default formats include report.html: the defaults without it."""


@dataclass
class Completed:
    """What a run of the command line left: as :class:`subprocess.CompletedProcess`."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def report_formats(args, html: bool, env: dict | None = None) -> dict[str, str]:
    """``HARNESS_FORMAT`` for a run of ``args``: the command's default formats but HTML, unless
    ``html``, ``--format`` or an ``HARNESS_FORMAT`` already set chooses."""
    environ = os.environ if env is None else env
    command = str(args[0]) if args else ""
    if html or command not in HTML_BY_DEFAULT or "HARNESS_FORMAT" in environ:
        return {}
    if any(str(a) == "--format" or str(a).startswith("--format=") for a in args):
        return {}
    return {"HARNESS_FORMAT": HTML_BY_DEFAULT[command]}


@contextlib.contextmanager
def _environment(extra: dict[str, str]):
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _forget_user_modules(names) -> None:
    """Unload the modules a run imported from the user's files (``--reference file.py:name``,
    their sibling modules): the next run imports its own files afresh, as a new process
    would. Modules of the environment and of the project stay loaded."""
    keep = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, PROJECT_ROOT / "harness",
                                                  PROJECT_ROOT / "loadtest"})
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and not str(Path(file).resolve()).startswith(keep):
            del sys.modules[name]


def harness(*args, html: bool = False, timeout: float | None = None) -> Completed:
    """``harness ARGS`` run in-process: stdout, stderr and the exit status as the process's.
    Nothing it sets outlives the call: signal handlers, the working directory and the
    environment are restored. ``timeout`` is accepted for the subprocess helper's callers
    (pytest-timeout bounds a hung test)."""
    from harness.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    cwd, path, modules = os.getcwd(), list(sys.path), set(sys.modules)
    tasks = dict(TASKS._places)  # a user's task file registers its task: gone with the process it ran in
    try:
        with _environment(report_formats(argv, html)), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exit_:
                code = exit_.code
                if code is None:
                    status = 0
                elif isinstance(code, int):
                    status = code
                else:
                    print(code, file=sys.stderr)
                    status = 1
            except Exception:  # what the interpreter would print, and its status
                traceback.print_exc()
                status = 1
    finally:
        os.chdir(cwd)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.path[:] = path
        _forget_user_modules(set(sys.modules) - modules)
        for name in set(TASKS._places) - set(tasks):
            del TASKS._places[name]
            TASKS._tasks.pop(name, None)
    return Completed(argv, int(status or 0), out.getvalue(), err.getvalue())


def harness_process(*args, html: bool = False, env: dict | None = None, timeout: float = 300,
                    cwd=None) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` as a subprocess (text, stdout and stderr captured)."""
    environ = dict(os.environ if env is None else env)
    environ.update(report_formats(args, html, environ))
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=environ, cwd=cwd)


__all__ = ["Completed", "harness", "harness_process", "report_formats"]
