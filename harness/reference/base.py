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
from harness.preprocessing.image_check import MAX_PIXELS, ImageError


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
        """:class:`ImageError` when resizing a ``height`` x ``width`` image would make more
        than :data:`MAX_PIXELS` pixels: a 1x65500 image passes the decoders' pixel limit,
        but its shorter side resized to 256 is 256x16.8M pixels (12 GiB), which no
        ``MemoryError`` announces: the process is killed. Recipes without a spec (``p``)
        are not checked."""
        spec = getattr(self, "p", None)
        if spec is None:
            return
        out_height, out_width = spec.resize.output_size(height, width)
        if out_height * out_width > MAX_PIXELS:
            raise ImageError(f"image too elongated: resizing its {width}x{height} pixels as the spec says makes "
                             f"{out_width}x{out_height} ({out_width * out_height / 1e6:.0f} megapixels; the limit "
                             f"is {MAX_PIXELS / 1e6:.0f})")

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
