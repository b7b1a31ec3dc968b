"""What the commands share besides their options (:mod:`harness.arguments`): the console,
progress bars, and how a job's report is printed."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from harness.client import TritonClient
from harness.names import plain_text, printable, terminal_text
from harness.report import render_markdown
from harness.report.formats import formats_line
from harness.session import Session

console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
"""Progress and messages go to stderr; stdout carries only results. Text is printed as text
(``markup=False``): a path or a name with ``[...]`` in it is never Rich markup; the few
styled lines pass ``markup=True`` with their text escaped (:func:`harness.names.terminal_text`).
Lines are never broken by Rich (``soft_wrap``): a report's path stays one string to copy."""


def say(line: str) -> None:
    """One line of a job's log on the console, as text: names in it never become markup or
    terminal control sequences (:func:`harness.names.plain_text`)."""
    console.print(plain_text(line))


PROGRESS_LINE_SECONDS = 15.0
"""Where stderr is no terminal (a CI log, a file), a plain progress line at most this often: Rich's
bar draws nothing there, and a long run would look hung."""


@contextlib.contextmanager
def progress_bar(total: int, description: str):
    """A rich progress bar on stderr; yields ``advance(status="")``. Where stderr is no terminal,
    a line ``description: done/total (percent), elapsed, left`` every :data:`PROGRESS_LINE_SECONDS`."""
    if not console.is_terminal:
        yield _progress_lines(total, plain_text(description))
        return
    # The status is an image's name: shown as text, never as Rich markup.
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}", markup=False), TimeRemainingColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task(terminal_text(description), total=total, status="")
        yield lambda status="": bar.update(task, advance=1, status=printable(status))


def _progress_lines(total: int, description: str):
    start = last = time.monotonic()
    done = 0

    def advance(status: str = "") -> None:
        nonlocal done, last
        done += 1
        now = time.monotonic()
        if now - last >= PROGRESS_LINE_SECONDS and done < total:
            last = now
            left = (now - start) / done * (total - done)
            console.print(f"{description}: {done}/{total} ({100 * done // max(total, 1)}%), "
                          f"{_minutes(now - start)} elapsed, about {_minutes(left)} left")

    return advance


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


@contextlib.contextmanager
def connect(session: Session, models: Sequence[str] | None = None) -> Iterator[TritonClient]:
    """A client to the session's ``--url``, or to an embedded server started for this command
    serving ``models`` (None: every model of the repository)."""
    with session.connect(log=say, models=models) as client:
        yield client


IMAGES_HELP = ("directory of images: every regular file in it is an input, and a symbolic link to one inside it; every "
               "other entry (hidden, a directory, a FIFO, a link leading outside) is listed as skipped, with why")


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def print_stage_report(report, paths: dict, formats, today) -> None:
    """report.md on stdout (rendered when --format left it out), and on stderr which files were
    written: ``today(paths)`` as always without --format, else every file."""
    out(paths["markdown"].read_text() if "markdown" in paths else render_markdown(report))
    say(today(paths) if formats is None else formats_line(paths.values()))


def print_accuracy(result, formats, today) -> None:
    """accuracy.md on stdout (rendered when --format left it out), and on stderr which files
    were written: ``today(result)`` prints it as always without --format, else every file is named."""
    from harness.accuracy.report import render_markdown as render_accuracy

    if result.markdown_path is not None:
        out(result.markdown_path.read_text())
    else:
        out(render_accuracy(result.report))
    if formats is None:
        today(result)
    else:
        say(formats_line(result.files.values()))
