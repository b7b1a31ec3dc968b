"""The memory budget of a check: images in flight are bounded by their decoded size, not
only by their count (a 480 KB PNG can decode to 500 MB). What one image may hold is
estimated from its header before it is read (:func:`estimated_bytes`); the
:class:`MemoryBudget` lets images start while their estimates fit, and one image larger
than the whole budget runs alone. The figures: docs/robustness.md."""

from __future__ import annotations

import math
import os
import threading
from typing import Callable

from harness.files import open_regular
from harness.listing import InputFile
from harness.operations.resize_mode import output_size

DEFAULT_MEMORY_BUDGET = 2 * 2 ** 30
"""Bytes the images in flight may hold, by :func:`estimated_bytes` (``--memory-budget``)."""
ResizedSize = Callable[[int, int], tuple[int, int]]
"""(height, width) -> the resize's output (height, width)."""
BYTES_PER_DECODED_BYTE = 6
"""Memory a check holds per byte of an image's decoded RGB pixels: the reference's decode
and its colour conversion, the deployed decode tap as the client receives it and as numpy
holds it, the isolation's inputs (measured: benchmarks/memory_budget.py, docs/robustness.md)."""


def estimated_bytes(file: InputFile, resized: ResizedSize | None = None) -> int:
    """What checking ``file`` may hold in memory: its size plus
    :data:`BYTES_PER_DECODED_BYTE` x its decoded RGB size, from its header (no pixel
    decoded), or x its resized RGB size where that is larger (``resized``: (height, width) ->
    the resize's output size): a header of 640 x 1 pixels resizes to 163,840 x 256 under a
    shorter side of 256, and twelve such images in flight held 5.1 GB under a 1 GiB budget.
    A file whose header cannot be read costs its size (it fails at once)."""
    from PIL import Image

    try:
        fd = open_regular(file.target, file.follow)
    except OSError:
        return 0
    try:
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            try:
                with Image.open(f) as im:
                    width, height = im.size
            except Exception:  # not an image PIL knows, a damaged header: it fails on its own, fast
                return size
    except OSError:
        return 0
    pixels = width * height
    if resized is not None and pixels:
        try:
            pixels = max(pixels, math.prod(resized(height, width)))
        except (ArithmeticError, ValueError):  # a size the resize refuses: that image fails on its own
            pass
    return size + pixels * 3 * BYTES_PER_DECODED_BYTE


def resized_by(spec) -> ResizedSize:
    """(height, width) -> the larger output size of ``spec``'s two resizes, the deployed one and
    training's (:func:`harness.operations.resize_mode.output_size`): what an image's resized
    stages hold, for :func:`estimated_bytes`."""
    resizes = (spec.preprocess.resize, spec.reference.preprocess.resize)
    return lambda height, width: max((output_size(height, width, r) for r in resizes), key=math.prod)


class MemoryBudget:
    """Bytes in flight, at most ``limit`` (an amount over the limit waits until enough is
    released; alone, it goes: the pixel limit, not the budget, refuses absurd images)."""

    def __init__(self, limit: int = DEFAULT_MEMORY_BUDGET,
                 resized: ResizedSize | None = None):
        self.limit, self.held, self.peak = limit, 0, 0
        self.resized = resized
        """(height, width) -> the largest resize output of the sides checked (None: not counted)."""
        self._cond = threading.Condition()

    def cost(self, file: InputFile) -> int:
        """What ``file`` holds in flight (:func:`estimated_bytes`)."""
        return estimated_bytes(file, self.resized)

    def acquire(self, amount: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.held == 0 or self.held + amount <= self.limit)
            self.held += amount
            self.peak = max(self.peak, self.held)

    def release(self, amount: int) -> None:
        with self._cond:
            self.held -= amount
            self._cond.notify_all()
        if amount >= TRIM_ABOVE:
            _trim()


TRIM_ABOVE = 64 * 2 ** 20
"""After an image that held this much, the freed heap goes back to the system (each worker
thread's malloc arena keeps what its images freed otherwise, and the next huge image on
another thread adds its own)."""


def _trim() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)  # glibc: every arena's free pages back to the system
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


