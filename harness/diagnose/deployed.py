"""The deployed side of a diagnosis, read from the server once, by check's own code: every
image checked as ``harness check`` checks it (:class:`harness.check.image.ImageChecker`, its
request loop :func:`harness.check.run.check_concurrently`), folded into check's verdict
(:class:`harness.compare.aggregate.RunSummary`), and every image's deployed stages kept (the
search then replays reference settings against them without asking the server again)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from harness.listing import InputFile, Skipped
from harness.outcome import Outcome
from harness.result import ImageResult
from harness.results import CheckSummary, ImageIssue
from harness.stage import Stage

if TYPE_CHECKING:
    from harness.check.image import ImageChecker

_NO_OUTPUT = ("deployed: no raw output (the deployment answers only boxes, and its ensemble's replay did not "
              "reproduce them): diagnose compares the model's output")

FETCH_WORKERS = 4
"""Images in flight while reading the deployed side (the server works while the client waits)."""


@dataclass
class Deployed:
    """The deployed tensors of every image the search replays, fetched from the server once."""

    names: list[str]
    data: list[bytes]
    stages: list[dict[str, np.ndarray]]
    """What the deployment answered, with the stages the task derives from it (a detector's boxes)."""
    failed: list[ImageIssue]
    """The images left out of the search (not compared by check, or without a raw output), each
    with its outcome."""
    answered: list[dict[str, np.ndarray]] = field(default_factory=list)
    """What the deployment answered, as it answered it (check's replay compares another reference with it)."""
    check: CheckSummary | None = None
    """Check's verdict on the same images: its per-image comparison, folded as check folds it
    (None: the deployed side was not read by check: a training callable's outputs)."""


def fetch_deployed(checker: "ImageChecker", files: Sequence[InputFile | Path], skipped: Sequence[Skipped] = (),
                   workers: int = FETCH_WORKERS, on_image: Callable[[str], None] = lambda name: None) -> Deployed:
    """Every image checked by ``checker`` as ``harness check`` does (its request policy:
    retries, one re-send of a rejection; its isolated runs), ``workers`` in flight; check's
    verdict folded from the results (``skipped`` entries are its rows too), and the deployed
    stages of every compared image kept, in the order of ``files``. An image that cannot be
    read, or that one side or both reject, is listed with check's reason and outcome. A server
    that stops answering ends the read with :class:`harness.errors.ServerStopped`."""
    from harness.check.run import check_concurrently
    from harness.compare.aggregate import RunSummary

    inputs = [f if isinstance(f, InputFile) else InputFile.of(Path(f)) for f in files]
    summary = RunSummary(events=checker.task.events(checker.tie_margin))
    for entry in skipped:
        summary.add(ImageResult(entry.name, error=entry.reason, skipped=True))
    checked: dict[str, tuple] = {}

    def record(result: ImageResult, tensors) -> None:
        summary.add(result)
        # only what the search replays against: the reference's and the isolated tensors go
        checked[result.image] = (result, None if tensors is None else (tensors.data, tensors.deployed, tensors.answered))
        on_image(result.image)

    stopped = check_concurrently(inputs, checker.check, max(1, workers), record)
    if stopped is not None:  # the images in flight were recorded; the others not started
        raise stopped
    deployed = Deployed([], [], [], [], [], summary.result())
    for file in inputs:
        result, kept = checked[file.name]
        if kept is None:
            deployed.failed.append(ImageIssue(file.name, result.error or "not compared", result.outcome))
        elif Stage.OUTPUT not in kept[1]:  # the search replays the reference up to the model's output
            deployed.failed.append(ImageIssue(file.name, _NO_OUTPUT, Outcome.FAILED))
        else:
            deployed.names.append(file.name)
            deployed.data.append(kept[0])
            deployed.stages.append(kept[1])
            deployed.answered.append(kept[2])
    return deployed
