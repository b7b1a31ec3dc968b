"""The deployed side as every job uses it: one deployment, a client per worker thread, and
one policy for requests (:class:`DeployedSide`).

- A server that does not answer (refused, reset, timed out, shutting down), or refuses a
  request as overloaded (its queue policy), is retried with back-off (0.5 s, 1 s, 2 s, ...),
  reconnecting each time; after ``retries`` the run ends with
  :class:`~harness.errors.ServerStopped` naming the server, the image and which it was.
- A request the server rejects is sent once more: Triton may have batched it with another
  image, and one undecodable image fails its whole DALI batch. A second rejection is the
  image's own (:class:`~harness.client.InferenceError`).
- Several images in one request (accuracy) that the server rejects are sent again one at a
  time, so a bad image fails alone.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TypeVar

import numpy as np

from harness.client import InferenceError, ServerOverloaded, ServerUnavailable, TritonClient
from harness.deployment.base import Deployment
from harness.errors import ServerStopped
from harness.result import one_line
from harness.stage import Stage

T = TypeVar("T")

RETRIES = 3
"""Retries of a request the server does not answer, with back-off, before the run ends."""
MAX_BACKOFF = 8.0
"""The longest wait between two tries (seconds): 0.5, 1, 2, 4, 8, 8, ..."""


class DeployedSide:
    """``deployment`` read through clients made by ``connect`` (one per thread); thread-safe."""

    def __init__(self, deployment: Deployment, connect: Callable[[], TritonClient], retries: int = RETRIES):
        self.deployment, self.connect, self.retries = deployment, connect, retries
        self._local = threading.local()

    def _client(self) -> TritonClient:
        if getattr(self._local, "client", None) is None:
            self._local.client = self.connect()
        return self._local.client

    def call(self, image: str | None, request: Callable[[TritonClient], T]) -> T:
        """``request`` with this thread's client, retried while the server does not answer."""
        for attempt in range(self.retries + 1):
            try:
                return request(self._client())
            except ServerUnavailable as exc:
                client = getattr(self._local, "client", None)
                url = client.url if client else "(server)"
                self._local.client = None  # reconnect on the next attempt
                if attempt == self.retries:
                    raise ServerStopped(url, image, str(exc), overloaded=isinstance(exc, ServerOverloaded)) from None
                time.sleep(min(MAX_BACKOFF, 0.5 * 2 ** attempt))
        raise AssertionError("unreachable")  # retries >= 0: the loop returns or raises

    def read(self, image: str, data: bytes) -> dict[Stage, np.ndarray]:
        """Every stage the deployment exposes for one image; a rejection is sent once more
        (see the module), then raised as :class:`InferenceError`."""
        try:
            return self.call(image, lambda c: self.deployment.read(c, data, image))
        except InferenceError:
            return self.call(image, lambda c: self.deployment.read(c, data, image))

    def isolate(self, image: str, stage: Stage, previous: np.ndarray) -> np.ndarray:
        """The deployment's ``stage`` run alone on the reference's previous stage."""
        return self.call(image, lambda c: self.deployment.isolate(c, stage, previous))

    def scores(self, names: Sequence[str], files: Sequence[bytes]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """Production scores of several images in one request ({name: scores}, {name: why it
        failed}); a rejected request is sent again one image at a time."""
        try:
            rows = self.call(names[0] if len(names) == 1 else None, lambda c: self.deployment.scores(c, list(files)))
            return dict(zip(names, rows)), {}
        except InferenceError as exc:
            if len(names) == 1:
                return {}, {names[0]: _reason(exc, self.deployment.model)}
        scores, failed = {}, {}
        for name, data in zip(names, files):
            found, why = self.scores([name], [data])
            scores.update(found)
            failed.update(why)
        return scores, failed


def _reason(exc: Exception, model: str) -> str:
    """The server's message, without Triton's "in ensemble 'NAME', " (the path is named beside it)."""
    return one_line(exc).removeprefix(f"in ensemble '{model}', ")
