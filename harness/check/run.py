"""The run: every image checked on a few threads, results streamed to disk as they complete,
folded into a :class:`RunSummary`; ``--resume`` reads back what a stopped run kept.

A run stops early, keeping every record written, when the server stops answering
(:class:`~harness.errors.ServerStopped`), when SIGINT or SIGTERM asks it to
(:class:`~harness.errors.Interrupted`), or when its records cannot be written (a full disk:
:class:`OutputFailed`). Memory: at most ``2 x workers`` images in flight, and at most the
:class:`MemoryBudget` by their estimated decoded size (one image larger than the budget
runs alone).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from harness.check.budget import MemoryBudget
from harness.check.files import TENSORS_DIRNAME, VISUALS_DIRNAME, save_image_tensors, tensors_path
from harness.check.image import ImageChecker, ImageTensors
from harness.check.rundir import Recovered, ResultsLog, RunDirectory
from harness.check.visuals import VisualStore
from harness.compare.aggregate import RunSummary
from harness.errors import Interrupted, RunStopped, ServerStopped, real_interrupt
from harness.listing import InputFile, Skipped
from harness.names import path_text
from harness.result import ImageResult

Checked = tuple[ImageResult, "ImageTensors | None"]

class OutputFailed(RunStopped):
    """The run's records could not be written (a full disk, a file system gone read-only)."""


@dataclass(frozen=True)
class RunOutcome:
    summary: RunSummary
    visuals: VisualStore
    stopped: RunStopped | None
    """Why the run ended early (None: every image was checked)."""
    seconds: float
    recovered: Recovered | None = None
    """What ``--resume`` read back (None: a new run)."""


def _input_file(item: InputFile | Path) -> InputFile:
    return item if isinstance(item, InputFile) else InputFile.of(Path(item))


def run_check(
    images: Iterable[InputFile | Path],
    checker: ImageChecker,
    out_dir: Path | RunDirectory,
    resume: bool = False,
    save_tensors: bool = False,
    workers: int = 4,
    on_result: Callable[[ImageResult], None] = lambda r: None,
    skipped: Sequence[Skipped] = (),
    budget: MemoryBudget | None = None,
    stop: threading.Event | None = None,
    stop_reason: Callable[[], str] = lambda: "interrupted",
    log: Callable[[str], None] = lambda line: None,
    task=None,
    tie_margin: float = 0.0,
) -> RunOutcome:
    """Check every image, streaming results to ``out_dir`` (a path: locked here for the run).
    ``skipped`` folder entries are recorded as rows first. With ``resume``, the records of an
    earlier run are read back (:meth:`ResultsLog.resume`: torn lines and duplicates dropped)
    and only what they lack is done; a record of an image no longer listed, or listed
    differently (skipped then, an input now), is dropped and redone. ``stop`` set (a signal)
    ends the run after the images in flight. ``task`` (default classification) folds the
    images into its events with ``tie_margin`` and names the CSV's result columns."""
    if not isinstance(out_dir, RunDirectory):
        with RunDirectory(out_dir) as run_dir:
            return run_check(images, checker, run_dir, resume, save_tensors, workers, on_result, skipped, budget,
                             stop, stop_reason, log, task, tie_margin)
    inputs = [_input_file(i) for i in images]
    expected = {f.name: False for f in inputs} | {s.name: True for s in skipped}
    summary = RunSummary(events=task.events(tie_margin) if task is not None else None)
    visuals = VisualStore(out_dir.subdirectory(VISUALS_DIRNAME))
    tensors_dir = out_dir.subdirectory(TENSORS_DIRNAME) if save_tensors else None
    done: set[str] = set()
    recovered = None

    def read_back(result: ImageResult) -> None:
        summary.add(result)
        visuals.offer(result, None)
        done.add(result.image)
        on_result(result)

    with ResultsLog(out_dir.path, task) as results:
        if resume and out_dir.has_results():
            recovered = results.resume(lambda r: expected.get(r.image) == r.skipped, read_back)
            if recovered.describe():
                log(f"--resume: {recovered.describe()}")
        else:
            results.start()

        def record(result: ImageResult, tensors: ImageTensors | None) -> None:
            # Its files first, its record last: a record on disk means its files are there too,
            # and the summary holds only what is on disk (a full disk stops the run between two).
            if tensors_dir is not None and tensors is not None:
                save_image_tensors(tensors_path(tensors_dir, result.image), tensors, result.image)
            visuals.offer(result, tensors)
            results.append(result)
            summary.add(result)
            on_result(result)

        start = time.perf_counter()
        stopped = None
        try:
            for entry in skipped:
                if entry.name not in done:
                    record(ImageResult(entry.name, error=entry.reason, skipped=True), None)
            todo = [f for f in inputs if f.name not in done]
            stopped = check_concurrently(todo, checker.check, workers, record, budget, stop, stop_reason)
        except OSError as exc:
            stopped = OutputFailed(f"cannot write the run's records in {path_text(out_dir.path)}: "
                                   f"{exc.strerror or exc}")
    return RunOutcome(summary, visuals, stopped, time.perf_counter() - start, recovered)


def check_concurrently(images: Iterable[InputFile], check: Callable[[InputFile], Checked], workers: int,
                       record: Callable[[ImageResult, "ImageTensors | None"], None],
                       budget: MemoryBudget | None = None, stop: threading.Event | None = None,
                       stop_reason: Callable[[], str] = lambda: "interrupted") -> RunStopped | None:
    """The request loop: ``check`` each image on ``workers`` threads (while some wait for the
    server, others compute), ``record`` each result in this thread as it completes. At most
    two images are in flight per worker, and, with ``budget``, at most its bytes by
    :meth:`MemoryBudget.cost` (released once recorded), so memory does not grow with the image
    count or size. At the first :class:`ServerStopped`, or once ``stop`` is set, no further
    image is started (those in flight finish and are recorded) and the reason is returned;
    None when every image was checked. An ``OSError`` of ``record`` propagates (after the
    images in flight finish)."""
    budget = budget or MemoryBudget(limit=2 ** 62)

    def work(file: InputFile) -> tuple[Checked, int]:
        cost = budget.cost(file)
        budget.acquire(cost)
        try:
            return check(file), cost
        except BaseException:
            budget.release(cost)
            raise

    stopped: RunStopped | None = None
    with ThreadPoolExecutor(workers) as pool:
        pending: set[Future] = set()
        queue = iter(images)
        try:
            while True:
                if stopped is None and stop is not None and stop.is_set():
                    stopped = Interrupted(stop_reason())
                while stopped is None and len(pending) < 2 * workers:
                    file = next(queue, None)
                    if file is None:
                        break
                    pending.add(pool.submit(work, file))
                if not pending:
                    return stopped
                finished, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                while finished:
                    future = finished.pop()
                    try:
                        checked, cost = future.result()
                    except ServerStopped as exc:
                        stopped = stopped or exc
                        continue
                    finally:
                        del future  # it holds the image's tensors too
                    try:
                        record(*checked)
                    finally:
                        del checked  # the tensors go before the budget says they did
                        budget.release(cost)
        except KeyboardInterrupt as exc:  # a second SIGINT/SIGTERM: stop now, keep what is recorded
            for future in pending:
                future.cancel()
            if not real_interrupt(exc):
                raise
            return Interrupted("interrupted twice: the images in flight were left out (--resume redoes them)")
        except BaseException:
            for future in pending:
                future.cancel()
            raise
