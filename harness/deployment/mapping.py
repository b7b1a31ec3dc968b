"""Which reference stage a deployed tensor is, worked out from its dtype, shape and values.

A foreign ensemble's step outputs carry the user's names, so the harness matches them to its
stages by what they hold (one probe image is enough; the mapping is then fixed for the run):

- the tensor fed to the step that produces the class scores is the model ``input``
  (whatever its range: it *is* what the model sees), NCHW or NHWC;
- an HWC or CHW image of 3 channels on the 0-255 scale (uint8, or float with values above
  2) is ``decode`` at the decoded file's own size, ``crop`` at the model input's size, and
  ``resize`` at any other;
- the scores output is ``output``.

Anything else (encoded bytes passed along, an input-like tensor of an earlier step, a mask)
is listed with the reason it maps to no stage, never silently dropped. ``overrides`` (from
``--stage STEP=STAGE``) win over all of this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.stage import Stage

NO_STAGE = "none"
"""An override value: this step's output is not compared."""
LAYOUTS = ("HWC", "CHW")


@dataclass(frozen=True)
class TensorMapping:
    """One deployed tensor and the stage it is compared as (None: not compared), why, and
    its layout (``HWC`` or ``CHW``: converted to the stage's convention before comparing)."""

    step: str
    tensor: str
    stage: Stage | None
    layout: str | None
    why: str

    def to_stage(self, array: np.ndarray) -> np.ndarray:
        """The tensor (one image, no batch dim) in the harness's convention: images HWC, the
        model input CHW float32."""
        if self.stage is None:
            return array
        wants = "HWC" if self.stage.is_image else "CHW"
        if self.stage is Stage.OUTPUT:
            return np.asarray(array, np.float32).reshape(-1)
        if self.layout != wants:
            array = np.transpose(array, (1, 2, 0) if wants == "HWC" else (2, 0, 1))
        return np.ascontiguousarray(array, np.float32 if self.stage is Stage.INPUT else None)

    def from_stage(self, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The inverse of :meth:`to_stage`: a reference stage in this tensor's layout and dtype."""
        wants = "HWC" if self.stage.is_image else "CHW"
        if self.stage is not Stage.OUTPUT and self.layout != wants:
            array = np.transpose(array, (2, 0, 1) if wants == "HWC" else (1, 2, 0))
        return np.ascontiguousarray(array, dtype)

    def describe(self) -> str:
        target = self.stage.value if self.stage else "not compared"
        return f"{self.step}.{self.tensor} -> {target} ({self.why})"


def image_layout(shape: tuple[int, ...]) -> str | None:
    """``HWC`` or ``CHW`` for a 3-channel image shape (HWC first when both could be), else None."""
    if len(shape) != 3:
        return None
    if shape[2] == 3 and min(shape[:2]) > 3:
        return "HWC"
    if shape[0] == 3 and min(shape[1:]) > 3:
        return "CHW"
    return None


def spatial(shape: tuple[int, ...], layout: str) -> tuple[int, int]:
    return tuple(shape[:2]) if layout == "HWC" else tuple(shape[1:])


def map_tensor(step: str, tensor: str, array: np.ndarray, *, decoded_size: tuple[int, int] | None,
               input_size: tuple[int, int], model_input: bool, scores: bool) -> TensorMapping:
    """The stage of one tensor (one image, no batch dim): see the module's rules.
    ``decoded_size``: (height, width) of the probe file as decoded (either orientation
    matches: EXIF may rotate it); ``input_size``: the model input's (height, width)."""
    shape, kind = tuple(array.shape), f"{array.dtype} {list(array.shape)}"
    if scores:
        return TensorMapping(step, tensor, Stage.OUTPUT, None, f"{kind}: the class scores")
    layout = image_layout(shape)
    if model_input:
        if layout is None:
            return TensorMapping(step, tensor, None, None, f"{kind}: fed to the classifier, but not a 3-channel image")
        return TensorMapping(step, tensor, Stage.INPUT, layout, f"{kind} {layout}: what the classifier step is fed")
    if layout is None:
        return TensorMapping(step, tensor, None, None, f"{kind}: not a 3-channel image")
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    high = float(finite.max()) if finite.size else 0.0
    if array.dtype != np.uint8 and high <= 2.0:
        return TensorMapping(step, tensor, None, layout,
                             f"{kind}: a normalized tensor, but the classifier is fed a later one")
    size = spatial(shape, layout)
    scale = "uint8" if array.dtype == np.uint8 else f"float, max {high:.4g}: 0-255 scale"
    if size == tuple(input_size):
        return TensorMapping(step, tensor, Stage.CROP, layout, f"{kind} {layout} ({scale}) at the model's input size")
    if decoded_size and size in (tuple(decoded_size), tuple(decoded_size)[::-1]):
        return TensorMapping(step, tensor, Stage.DECODE, layout, f"{kind} {layout} ({scale}) at the file's own size")
    return TensorMapping(step, tensor, Stage.RESIZE, layout, f"{kind} {layout} ({scale}) at neither the file's "
                                                             "nor the model's size")


def overridden(mapping: TensorMapping, stage: str, array: np.ndarray) -> TensorMapping:
    """``mapping`` with its stage set by the user (``none``: not compared)."""
    if stage == NO_STAGE:
        return TensorMapping(mapping.step, mapping.tensor, None, mapping.layout, "set by --stage: not compared")
    target = Stage(stage)
    layout = mapping.layout or image_layout(tuple(array.shape))
    if target not in (Stage.OUTPUT,) and layout is None:
        raise ValueError(f"{mapping.step}.{mapping.tensor} ({array.dtype} {list(array.shape)}) cannot be compared as "
                         f"{target}: it is not a 3-channel image")
    return TensorMapping(mapping.step, mapping.tensor, target, layout, "set by --stage")


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``STEP=STAGE`` or ``STEP.TENSOR=STAGE`` items -> {key: stage}; ValueError names a bad one."""
    out = {}
    choices = [s.value for s in Stage if s is not Stage.TOPK] + [NO_STAGE]
    for item in items or ():
        key, sep, stage = item.partition("=")
        if not sep or not key or stage not in choices:
            raise ValueError(f"--stage {item!r}: expected STEP_MODEL=STAGE (or STEP_MODEL.TENSOR=STAGE), "
                             f"STAGE one of {', '.join(choices)}")
        out[key] = stage
    return out
