"""The reference recipe: training-time preprocessing replayed on the file bytes.

A recipe turns encoded bytes into the named stages the deployed side also produces
(:data:`~harness.stage.PREPROCESS_STAGES`), as numpy arrays in one convention: image stages
HWC on the 0-255 scale, ``input`` CHW float32. Built-in recipes implement one hook per
stage, named after it, and are registered by :func:`register`; a custom recipe may produce
only some stages (at least ``input``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from harness.preprocessing import PREPROCESS_STAGES, Step, run_steps
from harness.preprocessing.image_check import check_resize
from harness.spec import RECIPES, Preprocess
from harness.stage import Stage

BUILT_IN: dict[str, type[Recipe]] = {}
"""Recipe name -> class: the one registry of preprocessing libraries. The spec's
``[reference] recipe``, diagnose's "resize with LIBRARY" hypotheses and ``harness train
--preprocessing`` (recipes with ``trains``) all read it."""


def register(cls: type[Recipe]) -> type[Recipe]:
    """Class decorator: add a built-in recipe to :data:`BUILT_IN` under its ``name``."""
    if cls.name not in RECIPES:  # the spec checks names without importing the libraries
        raise ValueError(f"recipe {cls.name!r}: add its name to harness.spec.RECIPES too")
    BUILT_IN[cls.name] = cls
    return cls


class Recipe:
    """Base class: subclasses implement one hook per stage, named after it (``decode``,
    ``resize``, ``crop``, ``input``), on their own image type (``native``)."""

    name = "recipe"
    stages: tuple[str, ...] = PREPROCESS_STAGES
    """The stages this recipe produces, in pipeline order."""
    native_rounding = ("half_up", "half_up")
    """What ``auto`` means in this library: (the resized size's rounding, the crop offsets')."""
    trains = False
    """Offered as a training preprocessing (``harness train --preprocessing NAME``)."""
    reading = None
    """The training definition this recipe is, read into the spec's operations
    (:class:`harness.reference.reading.Reading`), when it is one (``--reference hf:...``, a Compose)."""

    def __call__(self, data: bytes) -> dict[str, np.ndarray]:
        """Every stage of one image. Raises :class:`harness.preprocessing.ImageError` for bad files."""
        out = {}
        for stage, image in run_steps(self.steps(), data):
            out[stage] = self.to_array(image) if stage.is_image else np.ascontiguousarray(image, dtype=np.float32)
            if stage is Stage.DECODE:  # before the resize tries it, as the deployed pipelines do
                self.check_resize(*out[stage].shape[:2])
        return out

    def steps(self) -> dict[Stage, Step]:
        """Stage -> this recipe's step: the hook named after the stage (looked up on each
        call, so that a hook replaced on the instance, as diagnose's decode cache does, is used)."""
        return {stage: getattr(self, stage.value) for stage in PREPROCESS_STAGES}

    @classmethod
    def model_inputs(cls, p: Preprocess) -> Callable[[bytes], np.ndarray]:
        """For training: file bytes -> the CHW float32 model input, by this library with
        the spec's parameters (raises ImageError for a bad file)."""
        recipe = cls(p)
        return lambda data: recipe(data)[Stage.INPUT]

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

    def input(self, image: Any) -> np.ndarray:
        """The cropped image -> CHW float32 model input."""
        raise NotImplementedError

    def to_array(self, image: Any) -> np.ndarray:
        """A native image -> HWC numpy on the 0-255 scale."""
        return np.asarray(image)

    def describe(self) -> str:
        return self.name
