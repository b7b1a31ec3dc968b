"""The deployed side of a diagnosis: every image's stages and logits, read from the server once
(the search then replays reference settings against them without asking the server again)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from harness.deployment import DeployedSide
from harness.errors import ServerStopped
from harness.listing import InputFile, read_input
from harness.names import identifier
from harness.outcome import Outcome
from harness.results import ImageIssue
from harness.stage import Stage

_NO_OUTPUT = ("deployed: no raw output (the deployment answers only boxes, and its ensemble's replay did not "
              "reproduce them): diagnose compares the model's output")

FETCH_WORKERS = 4
"""Images in flight while reading the deployed side (the server works while the client waits)."""


@dataclass
class Deployed:
    """The deployed tensors of every image, fetched from the server once."""

    names: list[str]
    data: list[bytes]
    stages: list[dict[str, np.ndarray]]
    failed: list[ImageIssue]
    """The images the deployment did not answer, each with its outcome."""


def fetch_deployed(side: DeployedSide, images: list[Path], reference: Callable[[bytes], object] | None = None,
                   workers: int = FETCH_WORKERS, on_image: Callable[[str], None] = lambda name: None):
    """Every image's deployed stages, read once through ``side`` (its request policy: retries,
    one re-send of a rejection), ``workers`` in flight. An image that cannot be read, or that
    the server rejects, is listed with its reason; with ``reference``, a rejected image the
    reference can process is "rejected by deployment", else "failed". A server that stops
    answering ends the read with :class:`harness.errors.ServerStopped`."""

    def read(path: Path):
        name = identifier(path)
        try:
            data = read_input(InputFile.of(path))
        except OSError as exc:
            return name, None, None, ImageIssue(name, f"unreadable: {getattr(exc, 'reason', None) or exc}",
                                                Outcome.FAILED)
        try:
            stages = side.read(name, data)
            # what the task derives from the deployment's answer (a detector's boxes from its raw output)
            stages.update(side.deployment.task.derive_deployed(stages, {}))
            if Stage.OUTPUT not in stages:  # the search replays the reference up to the model's output
                return name, data, None, ImageIssue(name, _NO_OUTPUT, Outcome.FAILED)
            return name, data, stages, None
        except ServerStopped:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else the deployment does with one image is that image's
            return name, data, None, ImageIssue(name, f"deployed: {_line(exc)}", _one_sided(reference, data))

    deployed = Deployed([], [], [], [])
    pool = ThreadPoolExecutor(max(1, workers))
    try:
        for name, data, stages, failed in pool.map(read, images):
            if failed:
                deployed.failed.append(failed)
            else:
                deployed.names.append(name)
                deployed.data.append(data)
                deployed.stages.append(stages)
            on_image(name)
    finally:  # a stopped server: the images not started yet are not tried (each would wait out its retries)
        pool.shutdown(cancel_futures=True)
    return deployed


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _one_sided(reference: Callable[[bytes], object] | None, data: bytes) -> Outcome:
    """Rejected by deployment when the reference processes what the deployment rejected."""
    if reference is None:
        return Outcome.FAILED
    try:
        reference(data)
    except Exception:  # noqa: BLE001 - failing on both sides is the ordinary "failed"
        return Outcome.FAILED
    return Outcome.REJECTED_BY_DEPLOYMENT
