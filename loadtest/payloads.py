"""What the load test sends: the photos of the corpus, and optionally a share of bad payloads.

Every user rotates through the photos, each from its own starting photo. With a bad
fraction ``f``, exactly ``floor(n * f)`` of a user's first ``n`` requests carry a bad
payload (every ``1/f``-th request, not a random draw), so a run's error counts are known
in advance and checked exactly. The kinds of bad payload take turns.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from loadtest.samples import PHOTO


def truncated(data: bytes) -> bytes:
    """The first half of the file: a JPEG without its end (the server says "truncated JPEG")."""
    return data[: len(data) // 2]


def not_an_image(data: bytes) -> bytes:
    """Random bytes as long as the file (the server says "not an image")."""
    seed = len(data)  # deterministic, so a run is reproducible
    noise = np.random.default_rng(seed).integers(1, 256, len(data), dtype=np.uint8)
    noise[:2] = ord("X")  # no image format starts so; random bytes could (e.g. "BM")
    return noise.tobytes()


BAD_PAYLOADS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": truncated,
    "not_an_image": not_an_image,
}
"""Kinds of bad payload, in the order they take turns."""


def list_photos(directory: Path) -> list[Path]:
    """The files directly in ``directory`` (hidden ones aside), sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"image directory not found: {directory}")
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise FileNotFoundError(f"no images in {directory}")
    return files


class PayloadSchedule:
    """Which payload a user sends next.

    Args:
        photos: encoded files to rotate through.
        bad_fraction: share of requests that carry a bad payload, 0 <= f < 1; default 0.
        start: index of the first photo (users start at different photos); default 0.
    """

    def __init__(self, photos: list[bytes], bad_fraction: float = 0.0, start: int = 0):
        if not photos:
            raise ValueError("no photos to send")
        if not 0.0 <= bad_fraction < 1.0:
            raise ValueError(f"bad fraction must be in [0, 1), got {bad_fraction}")
        self.photos = photos
        self.bad_fraction = bad_fraction
        self._next_photo = start % len(photos)
        self._sent = 0
        self._bad_sent = 0

    def next(self) -> tuple[str, bytes]:
        """(payload kind, file bytes) of the next request."""
        photo = self.photos[self._next_photo]
        self._next_photo = (self._next_photo + 1) % len(self.photos)
        self._sent += 1
        if math.floor(self._sent * self.bad_fraction) > self._bad_sent:
            kinds = list(BAD_PAYLOADS)
            kind = kinds[self._bad_sent % len(kinds)]
            self._bad_sent += 1
            return kind, BAD_PAYLOADS[kind](photo)
        return PHOTO, photo
