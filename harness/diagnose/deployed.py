"""The deployed side of a diagnosis: every image's stages and logits, read from the server once
(the search then replays reference settings against them without asking the server again)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from harness.client import ServerUnavailable, TritonClient
from harness.errors import ServerStopped
from harness.results import ImageIssue

FETCH_WORKERS = 4
"""Images in flight while reading the deployed side (the server works while the client waits)."""
RETRIES = 3
"""Retries of a request the server does not answer, with back-off, before the run ends."""


@dataclass
class Deployed:
    """The deployed tensors of every image, fetched from the server once."""

    names: list[str]
    data: list[bytes]
    stages: list[dict[str, np.ndarray]]
    failed: list[ImageIssue]
    """The images the deployment did not answer, each with its outcome."""


def fetch_deployed(connect_client: Callable[[], TritonClient], images: list[Path], pipeline: str,
                   reference: Callable[[bytes], object] | None = None, workers: int = FETCH_WORKERS,
                   retries: int = RETRIES, on_image: Callable[[str], None] = lambda name: None):
    """Every image's deployed stages and logits, read once (``workers`` in flight, one client
    each). An image that cannot be read, or that the server rejects, is listed with its reason;
    with ``reference``, a rejected image the reference can process is "rejected by
    deployment", else "failed". A server that stops answering ends the read with
    :class:`harness.errors.ServerStopped` after ``retries``."""
    local = threading.local()

    def read(path: Path):
        try:
            data = path.read_bytes()
        except OSError as exc:
            return path.name, None, None, ImageIssue(path.name, f"unreadable: {exc}", "failed")
        for attempt in range(retries + 1):
            try:
                if getattr(local, "client", None) is None:
                    local.client = connect_client()
                return path.name, data, local.client.deployed(data, pipeline), None
            except ServerUnavailable as exc:
                url = getattr(local.client, "url", "(server)")
                local.client = None  # reconnect on the next attempt
                if attempt == retries:
                    raise ServerStopped(url, path.name, str(exc)) from None
                time.sleep(0.5 * 2 ** attempt)
            except Exception as exc:  # noqa: BLE001 - anything else the deployment does with one image is that image's
                return path.name, data, None, ImageIssue(path.name, f"deployed: {_line(exc)}",
                                                         _one_sided(reference, data))

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


def _one_sided(reference: Callable[[bytes], object] | None, data: bytes) -> str:
    """"rejected by deployment" when the reference processes what the deployment rejected."""
    if reference is None:
        return "failed"
    try:
        reference(data)
    except Exception:  # noqa: BLE001 - failing on both sides is the ordinary "failed"
        return "failed"
    return "rejected by deployment"
