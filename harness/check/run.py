"""The run: every image checked on a few threads, results streamed to disk as they complete,
folded into a :class:`RunSummary`; ``--resume`` reads back what a stopped run kept."""

from __future__ import annotations

import csv
import json
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from harness.check.files import (
    CSV_FILENAME,
    RESULTS_FILENAME,
    TENSORS_DIRNAME,
    VISUALS_DIRNAME,
    csv_header,
    csv_row,
    save_image_tensors,
)
from harness.check.image import ImageChecker, ImageTensors
from harness.check.visuals import VisualStore
from harness.compare.aggregate import RunSummary
from harness.compare.result import ImageResult
from harness.errors import ServerStopped

Checked = tuple[ImageResult, "ImageTensors | None"]


@dataclass(frozen=True)
class RunOutcome:
    summary: RunSummary
    visuals: VisualStore
    stopped: ServerStopped | None
    """Why the run ended early (None: every image was checked)."""
    seconds: float


def run_check(
    images: list[Path],
    checker: ImageChecker,
    out_dir: Path,
    resume: bool = False,
    save_tensors: bool = False,
    workers: int = 4,
    on_result: Callable[[ImageResult], None] = lambda r: None,
    task=None,
    tie_margin: float = 0.0,
) -> RunOutcome:
    """Check every image, streaming results to ``out_dir``. Images already in
    ``images.jsonl`` are not redone when ``resume``. ``task`` (default classification) folds
    the images into its events with ``tie_margin`` and names the CSV's result columns."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path, csv_path = out_dir / RESULTS_FILENAME, out_dir / CSV_FILENAME
    summary = RunSummary(events=task.events(tie_margin) if task is not None else None)
    visuals = VisualStore(out_dir / VISUALS_DIRNAME)
    done: set[str] = set()
    if resume and results_path.exists():
        with results_path.open() as f:
            for line in f:
                if line.strip():
                    result = ImageResult.from_dict(json.loads(line))
                    summary.add(result)
                    visuals.offer(result, None)
                    done.add(result.image)
                    on_result(result)
    else:
        results_path.write_text("")
        with csv_path.open("w", newline="") as f:
            csv.writer(f).writerow(csv_header(task))
    if save_tensors:
        (out_dir / TENSORS_DIRNAME).mkdir(exist_ok=True)
    todo = [p for p in images if p.name not in done]

    start = time.perf_counter()
    with results_path.open("a") as results_file, csv_path.open("a", newline="") as csv_file:
        writer = csv.writer(csv_file)

        def record(result: ImageResult, tensors: ImageTensors | None) -> None:
            results_file.write(json.dumps(result.to_dict(), allow_nan=True) + "\n")
            results_file.flush()
            writer.writerow(csv_row(result, task))
            csv_file.flush()
            summary.add(result)
            visuals.offer(result, tensors)
            if save_tensors and tensors is not None:
                save_image_tensors(out_dir / TENSORS_DIRNAME / f"{result.image}.npz", tensors)
            on_result(result)

        stopped = check_concurrently(todo, checker.check, workers, record)
    return RunOutcome(summary, visuals, stopped, time.perf_counter() - start)


def check_concurrently(images: Iterable[Path], check: Callable[[Path], Checked], workers: int,
                       record: Callable[[ImageResult, "ImageTensors | None"], None]) -> ServerStopped | None:
    """The request loop: ``check`` each image on ``workers`` threads (while some wait for the
    server, others compute), ``record`` each result in this thread as it completes. At most
    two images are in flight per worker, so memory does not grow with the image count. At
    the first :class:`ServerStopped` no further image is started (those in flight finish)
    and it is returned; None when every image was checked."""
    stopped = None
    with ThreadPoolExecutor(workers) as pool:
        pending, queue = set(), iter(images)
        while True:
            while stopped is None and len(pending) < 2 * workers:
                path = next(queue, None)
                if path is None:
                    break
                pending.add(pool.submit(check, path))
            if not pending:
                return stopped
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    record(*future.result())
                except ServerStopped as exc:
                    stopped = stopped or exc
