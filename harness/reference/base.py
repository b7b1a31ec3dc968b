"""The reference recipe: training-time preprocessing replayed on the file bytes.

A recipe turns encoded bytes into the named stages the deployed side also produces
(``decode``, ``resize``, ``crop``, ``input``), as numpy arrays in one convention:
image stages HWC on the 0-255 scale, ``input`` CHW float32. Built-in recipes implement
the four hooks; a custom recipe may produce only some stages (at least ``input``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.preprocessing import PREPROCESS_STAGES
from harness.preprocessing.image_check import check_resize


class Recipe:
    """Base class: subclasses implement the hooks on their own image type (``native``)."""

    name = "recipe"
    stages: tuple[str, ...] = PREPROCESS_STAGES
    """The stages this recipe produces, in pipeline order."""

    def __call__(self, data: bytes) -> dict[str, np.ndarray]:
        """Every stage of one image. Raises :class:`harness.preprocessing.ImageError` for bad files."""
        out = {}
        image = self.decode(data)
        out["decode"] = self.to_array(image)
        self.check_resize(*out["decode"].shape[:2])
        image = self.resize(image)
        out["resize"] = self.to_array(image)
        image = self.crop(image)
        out["crop"] = self.to_array(image)
        out["input"] = np.ascontiguousarray(self.to_input(image), dtype=np.float32)
        return out

    def check_resize(self, height: int, width: int) -> None:
        """:func:`harness.preprocessing.image_check.check_resize` with the recipe's spec
        (recipes without a spec, ``p``, are not checked)."""
        spec = getattr(self, "p", None)
        if spec is not None:
            check_resize(height, width, spec.resize)

    # -- hooks --------------------------------------------------------------------------
    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def resize(self, image: Any) -> Any:
        raise NotImplementedError

    def crop(self, image: Any) -> Any:
        raise NotImplementedError

    def to_input(self, image: Any) -> np.ndarray:
        """The cropped image -> CHW float32 model input."""
        raise NotImplementedError

    def to_array(self, image: Any) -> np.ndarray:
        """A native image -> HWC numpy on the 0-255 scale."""
        return np.asarray(image)

    def describe(self) -> str:
        return self.name
