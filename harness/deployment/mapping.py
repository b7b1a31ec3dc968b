"""Which reference stage a deployed tensor is, worked out from evidence: its dtype and shape,
its whole value distribution, and the reference's own stages of the same probe image.

A deployment's step outputs carry the user's names, so the harness matches them to its
stages by what they hold (one probe image; the mapping is then fixed for the run):

- the scores output is ``output``;
- a tensor of 3 channels (HWC or CHW) gets its **scale** from how its values relate to the
  reference's pixels of the same photo (:func:`read_scale`): the standard deviation and mean
  of the tensor against those of the reference's image give the affine map ``(x - m) / s``
  from pixels to the tensor, whatever the photo's brightness. ``s`` about 1 (values within
  0-255): an image on the 0-255 scale; ``s`` about 255 (values within 0-1): an image on 0-1;
  otherwise, a mean subtracted (``m`` away from 0, or negative values): a **normalized**
  tensor. uint8 is the 0-255 scale;
- an image is the reference image stage of its size it is closest to after the layout (and
  scale) conversion: ``decode``, ``resize`` or ``crop`` (by size alone, the file's own size
  is ``decode``, the model input's ``crop``, another ``resize``, when the reference has no
  stage of that size);
- a normalized tensor at the model input's size is ``input``: the reference's normalized
  tensor at that point, in the tensor's layout. Of several tensors of one stage, the one
  nearest the model is compared; an earlier one is what the step after it is fed when that
  step runs alone (a layout step fed the reference's normalized tensor, say).

A tensor the evidence does not settle (a flat probe image, a scale between the known ones,
a normalized tensor at another size, no reference stage to read it against) is never
compared on a guess: it is listed with the reason and the ``--stage`` line that would
compare it. Only the classifier's own input, when its scale cannot be read, stays ``input``
(it *is* what the model sees). ``overrides`` (``--stage STEP=STAGE``, or a spec's
``[deployment.stages]``) win over all of this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from harness.stage import IMAGE_STAGES, Stage

NO_STAGE = "none"
"""An override value: this step's output is not compared."""
LAYOUTS = ("HWC", "CHW")

# What the affine fit (x - m) / s of a tensor against the reference's pixels must show
# (s and m in 8-bit levels). Content read through another resize or crop changes the
# moments by some percent; a gain 1.5x off is no longer the same scale.
SCALE_BAND = 1.5
"""An image's fitted ``s`` is within this factor of 1 (0-255) or of 255 (0-1)."""
OFFSET_LEVELS = 40.0
"""Outside the image scales, a fitted ``m`` within this many levels of 0 (and no negative value)
is no subtracted mean: such a tensor is not settled."""
FLAT_LEVELS = 2.0
"""A probe whose reference image has a smaller standard deviation says nothing about a scale."""
STD_RANGE = (0.5, 600.0)
"""Fitted ``s`` of a normalized tensor (1 for "x - mean" to 255 for "x / 255 - mean", with room)."""


@dataclass(frozen=True)
class Scale:
    """What a 3-channel tensor's values are: ``0-255``, ``0-1`` or ``normalized`` (``None``:
    not settled, ``why`` says what is missing), and the fit behind it."""

    kind: str | None
    why: str
    std: float = math.nan
    """``s`` of the fit ``(pixel - m) / s``, in levels."""
    mean: float = math.nan

    @property
    def image(self) -> bool:
        return self.kind in ("0-255", "0-1")

    @property
    def factor(self) -> float:
        """What the tensor is multiplied by to be on the 0-255 scale (images only)."""
        return 255.0 if self.kind == "0-1" else 1.0


@dataclass(frozen=True)
class TensorMapping:
    """One deployed tensor, the stage it is compared as (None: not compared), why, its
    layout (``HWC`` or ``CHW``: converted to the stage's convention before comparing) and
    ``scale`` (an image on 0-1 is multiplied by 255). ``compared`` False: the stage is read
    from a later tensor; this one is only what the next step is fed when run alone."""

    step: str
    tensor: str
    stage: Stage | None
    layout: str | None
    why: str
    scale: float = 1.0
    compared: bool = True
    suggestion: str | None = None
    """For a tensor not compared: the ``--stage`` line that would compare it."""
    batch_of_one: bool = False
    """The tensor carries a leading batch axis of one its step declares (an unbatched model's
    ``[1, 3, H, W]``): read without it, given back with it."""

    def to_stage(self, array: np.ndarray) -> np.ndarray:
        """The tensor (one image, no batch dim) in the harness's convention: images HWC on
        the 0-255 scale, the model input CHW float32."""
        if self.stage is None:
            return array
        if self.batch_of_one:
            array = array[0]
        if self.stage is Stage.OUTPUT:
            return np.asarray(array, np.float32).reshape(-1)
        wants = "HWC" if self.stage.is_image else "CHW"
        if self.layout != wants:
            array = np.transpose(array, (1, 2, 0) if wants == "HWC" else (2, 0, 1))
        if self.scale != 1.0:
            return np.ascontiguousarray(np.asarray(array, np.float32) * np.float32(self.scale))
        return np.ascontiguousarray(array, np.float32 if self.stage is Stage.INPUT else None)

    def from_stage(self, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The inverse of :meth:`to_stage`: a reference stage in this tensor's layout, scale and dtype."""
        wants = "HWC" if self.stage.is_image else "CHW"
        if self.stage is not Stage.OUTPUT and self.layout != wants:
            array = np.transpose(array, (2, 0, 1) if wants == "HWC" else (1, 2, 0))
        if self.scale != 1.0:
            array = np.asarray(array, np.float32) / np.float32(self.scale)
        if np.dtype(dtype) == np.uint8:
            array = np.clip(np.rint(array), 0, 255)
        return np.ascontiguousarray(array[None] if self.batch_of_one else array, dtype)

    def describe(self) -> str:
        if self.stage is None or not self.compared:
            target = "not compared"
        else:
            target = self.stage.value
        batch = " (a batch of one)" if self.batch_of_one else ""
        line = f"{self.step}.{self.tensor}{batch} -> {target} ({self.why})"
        return line + (f"; to compare it: {self.suggestion}" if self.suggestion else "")


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


def as_hwc(array: np.ndarray, layout: str) -> np.ndarray:
    return array if layout == "HWC" else np.transpose(array, (1, 2, 0))


def read_scale(hwc: np.ndarray, pixels: np.ndarray | None) -> Scale:
    """The scale of a 3-channel tensor (HWC) from its values and ``pixels``, the reference's
    image of the same photo on the 0-255 scale (any size; None: the reference has none)."""
    if hwc.dtype == np.uint8:
        return Scale("0-255", "uint8")
    values = np.asarray(hwc, np.float64)
    if not np.isfinite(values).all():
        return Scale(None, "it holds NaN or Inf")
    low, high = float(values.min()), float(values.max())
    shown = f"values {low:.3g}..{high:.3g}, channel means {[round(float(m), 3) for m in values.mean(axis=(0, 1))]}"
    if pixels is None:
        return Scale(None, f"{shown}; the reference has no image of this photo to read its scale against")
    reference = np.asarray(pixels, np.float64)
    if reference.std() < FLAT_LEVELS or values.std() == 0:
        return Scale(None, f"{shown}; the probe image is too flat to read a scale from")
    std = reference.std() / values.std()
    mean = reference.mean() - values.mean() * std
    fit = f"{shown}: (pixel {'-' if mean >= 0 else '+'} {abs(mean):.4g}) / {std:.4g} of the reference's pixels"
    for kind, unit in (("0-255", 1.0), ("0-1", 255.0)):
        if unit / SCALE_BAND <= std <= unit * SCALE_BAND:
            if -8.0 / unit <= low and high <= 263.0 / unit:  # a level or so of resampling overshoot
                # An offset here is content (another resize or crop of the photo), not a subtracted mean.
                return Scale(kind, f"{fit}: an image on the {kind} scale", std, mean)
            if low >= 0:
                return Scale(None, f"{fit}: an image on the {kind} scale by its spread, but its values leave that "
                                   "range", std, mean)
    if abs(mean) <= OFFSET_LEVELS and low >= 0:
        return Scale(None, f"{fit}: scaled like no known image scale, and no mean subtracted", std, mean)
    if not STD_RANGE[0] <= std <= STD_RANGE[1]:
        return Scale(None, f"{fit}: its values do not scale like the reference's pixels", std, mean)
    return Scale("normalized", f"{fit}: normalized", std, mean)


def read_against_input(hwc: np.ndarray, model_input: np.ndarray) -> Scale:
    """Without a reference image: whether the tensor is normalized like the reference's
    model input (``model_input``, CHW), by the same fit."""
    values, reference = np.asarray(hwc, np.float64), np.asarray(model_input, np.float64)
    if not np.isfinite(values).all() or values.std() == 0 or reference.std() == 0:
        return Scale(None, "flat or not finite")
    gain = values.std() / reference.std()
    offset = (values.mean() - reference.mean() * gain) / values.std()
    shown = f"values {values.min():.3g}..{values.max():.3g}"
    if 1 / SCALE_BAND <= gain <= SCALE_BAND and abs(offset) <= 1.0:
        return Scale("normalized", f"{shown}: scaled like the reference's model input")
    return Scale(None, f"{shown}: {gain:.3g} times the spread of the reference's model input; the reference has no "
                       "image stage to read it against")


def pixels_of(reference: Mapping[str, np.ndarray] | None, size: tuple[int, int]) -> np.ndarray | None:
    """The reference image to read a scale against: one of ``size`` if any (crop first), else the crop's."""
    if not reference:
        return None
    images = [reference[s] for s in reversed(IMAGE_STAGES) if s in reference]
    same = [image for image in images if tuple(image.shape[:2]) == tuple(size)]
    return (same or images or [None])[0]


def map_tensor(step: str, tensor: str, array: np.ndarray, *, decoded_size: tuple[int, int] | None,
               input_size: tuple[int, int], model_input: bool, scores: bool,
               reference: Mapping[str, np.ndarray] | None = None) -> TensorMapping:
    """The stage of one tensor (one image, no batch dim): see the module's rules.
    ``decoded_size``: (height, width) of the probe file as decoded (either orientation
    matches: EXIF may rotate it); ``input_size``: the model input's (height, width);
    ``model_input``: the classifier is fed this tensor; ``reference``: the reference's stages
    of the probe (images HWC 0-255, ``input`` CHW), the evidence a scale and stage are read against."""
    shape, kind = tuple(array.shape), f"{array.dtype} {list(array.shape)}"
    key = f"{step}.{tensor}"
    if scores:
        return TensorMapping(step, tensor, Stage.OUTPUT, None, f"{kind}: the class scores")
    layout = image_layout(shape)
    if layout is None:
        what = "fed to the step making the scores, but not a 3-channel image" if model_input else "not a 3-channel image"
        return TensorMapping(step, tensor, None, None, f"{kind}: {what}")
    size, hwc = spatial(shape, layout), as_hwc(array, layout)
    scale = read_scale(hwc, pixels_of(reference, size))
    if scale.kind is None and reference and not any(s in reference for s in IMAGE_STAGES) and Stage.INPUT in reference:
        scale = read_against_input(hwc, reference[Stage.INPUT])
    where = f"{kind} {layout}"
    if scale.kind == "normalized":
        if size != tuple(input_size):
            return TensorMapping(step, tensor, None, layout, f"{where}, {scale.why}, at {list(size)}, not the model "
                                 f"input's size {list(input_size)}: the reference has no normalized tensor there")
        fed = ": what the model step is fed" if model_input else ""
        return TensorMapping(step, tensor, Stage.INPUT, layout, f"{where}, {scale.why}: the reference's input{fed}")
    if scale.kind is None:
        if model_input:
            return TensorMapping(step, tensor, Stage.INPUT, layout, f"{where}, what the model step is fed (its "
                                 f"scale unread: {scale.why})")
        return TensorMapping(step, tensor, None, layout, f"{where}, {scale.why}",
                             suggestion=_suggest(key, size, decoded_size, input_size, reference))
    stage, closeness = _image_stage(hwc * scale.factor if scale.factor != 1 else hwc, size, decoded_size, input_size,
                                    reference)
    if stage is None:
        return TensorMapping(step, tensor, None, layout, f"{where}, {scale.why}; the reference has no image stage "
                                                         "to compare it with")
    return TensorMapping(step, tensor, stage, layout, f"{where}, {scale.why}, {closeness}", scale.factor)


def _image_stage(hwc: np.ndarray, size: tuple[int, int], decoded_size, input_size,
                 reference: Mapping[str, np.ndarray] | None) -> tuple[Stage | None, str]:
    """The reference image stage of ``size`` the image is closest to (RMSE in levels; ties:
    the later stage), else the stage its size says; (None, ...) without reference image stages."""
    candidates = [s for s in IMAGE_STAGES if reference and s in reference and tuple(reference[s].shape[:2]) == size]
    if candidates:
        errors = {s: float(np.sqrt(np.mean(np.square(hwc.astype(np.float64) - reference[s].astype(np.float64)))))
                  for s in candidates}
        best = min(reversed(candidates), key=lambda s: errors[s])  # the later stage on a tie (a stretch: resize = crop)
        return best, (f"closest to the reference's {best} (RMSE {errors[best]:.3g} levels)" if len(candidates) > 1
                      else f"the reference's {best} has this size (RMSE {errors[best]:.3g} levels)")
    if reference is not None and not any(s in reference for s in IMAGE_STAGES):
        return None, ""
    if size == tuple(input_size):
        return Stage.CROP, "at the model's input size"
    if decoded_size and size in (tuple(decoded_size), tuple(decoded_size)[::-1]):
        return Stage.DECODE, "at the file's own size"
    return Stage.RESIZE, "at neither the file's nor the model's size"


def _suggest(key: str, size, decoded_size, input_size, reference) -> str:
    """The ``--stage`` line that compares an unsettled tensor as the stage its size suggests."""
    if size == tuple(input_size):
        options = "crop (an image) or input (normalized)"
    elif decoded_size and size in (tuple(decoded_size), tuple(decoded_size)[::-1]):
        options = "decode"
    else:
        options = "resize"
    return f"--stage {key}=STAGE, STAGE {options}"


def overridden(mapping: TensorMapping, stage: str, array: np.ndarray, source: str = "--stage",
               reference: Mapping[str, np.ndarray] | None = None) -> TensorMapping:
    """``mapping`` with its stage set by the user (``none``: not compared); ``source`` says
    where (``--stage``, or a spec's ``[deployment.stages]``). An image stage takes the scale
    the values show (0-1 when the fit, or failing it the values, say so)."""
    if stage == NO_STAGE:
        return TensorMapping(mapping.step, mapping.tensor, None, mapping.layout, f"set by {source}: not compared")
    target = Stage(stage)
    layout = mapping.layout or image_layout(tuple(array.shape))
    if target is not Stage.OUTPUT and layout is None:
        raise ValueError(f"{mapping.step}.{mapping.tensor} ({array.dtype} {list(array.shape)}) cannot be compared as "
                         f"{target}: it is not a 3-channel image")
    factor = 1.0
    if target.is_image and array.dtype != np.uint8:
        hwc = as_hwc(array, layout)
        read = read_scale(hwc, pixels_of(reference, spatial(array.shape, layout)))
        unit = read.kind if read.image else ("0-1" if np.nanmax(np.abs(hwc)) <= 1.0 else "0-255")
        factor = 255.0 if unit == "0-1" else 1.0
        return replace(mapping, stage=target, layout=layout, why=f"set by {source}, on the {unit} scale", scale=factor,
                       compared=True, suggestion=None)
    return replace(mapping, stage=target, layout=layout, why=f"set by {source}", scale=factor, compared=True,
                   suggestion=None)


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
