"""How encoded image files travel in one request: :func:`pack_images`.

Needs only numpy: the client (:mod:`harness.client`), every deployment
(:mod:`harness.deployment.base`) and the Locust image (tritonclient and numpy only) share it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pack_images(images: Sequence[bytes]) -> np.ndarray:
    """Encoded files -> one [batch, max_len] UINT8 tensor, shorter files zero padded (DALI's convention)."""
    length = max((len(b) for b in images), default=0)
    batch = np.zeros((len(images), length), np.uint8)
    for row, data in zip(batch, images):
        row[:len(data)] = np.frombuffer(data, np.uint8)
    return batch
