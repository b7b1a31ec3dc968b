"""The center crop (``[crop]``: ``size`` and ``offset_rounding``) after a classifier's resize.

Its geometry rule is :func:`offsets`: the window's top and left, ``(side - crop) / 2`` rounded
as the spec says (``half_up``: DALI's ``crop_pos = 0.5``; ``half_even``: torchvision's
``round()``; ``floor``: the hand-written ``(H - 224) // 2`` and Hugging Face's; ``auto``: the
library's own, :attr:`harness.reference.base.Recipe.native_rounding`). A detector's resize makes
the model input itself (a letterbox's padding, a limit-side image as it is): no crop, and its
kernels pass the image through.
"""

from __future__ import annotations

import math
from typing import Any

from harness.operations.base import Alternative, Key, Operation
from harness.stage import Stage

OFFSET_ROUNDINGS = ("auto", "half_up", "half_even", "floor")
SIZE = Key("crop", "size", (224, 224), doc="[height, width] of the window (one number: a square).")
OFFSET_ROUNDING = Key("crop", "offset_rounding", "auto", OFFSET_ROUNDINGS,
                      "``half_up`` (DALI), ``half_even`` (torchvision's round()), ``floor`` (the hand-written "
                      "``(H - 224) // 2``), or ``auto``: the library's own.")

ROUNDING_CULPRIT = "crop offset rounding"


def round_half_up(x: float) -> int:
    # DALI rounds output sizes and crop offsets half up; Python's round() rounds half to even.
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def offsets(crop: Any, height: int, width: int) -> tuple[int, int]:
    """(top, left) of ``crop``'s (the spec's ``CropSpec``) centered window in an image of the
    given size (``auto``: half up)."""
    rnd = {"half_even": round, "floor": math.floor}.get(crop.offset_rounding, round_half_up)
    return (rnd((height - crop.size[0]) / 2), rnd((width - crop.size[1]) / 2))


def table(size, rounding: str) -> dict[str, Any]:
    """The ``[crop]`` table of a center crop to ``size`` with offsets rounded ``rounding`` (a
    framework's reading)."""
    return {SIZE.name: size, OFFSET_ROUNDING.name: rounding}


def spelled_out(p, native: str) -> dict[str, dict[str, str]]:
    """The ``[crop]`` table with an ``auto`` rounding spelled out as ``native``, the library's own."""
    rounding = p.crop.offset_rounding
    return OFFSET_ROUNDING.table_of(native if rounding == "auto" else rounding)


def _crops(p) -> bool:
    """Whether the spec center-crops (a detector's resize makes the model input itself)."""
    return not p.resize.for_detector


def _alternatives(recipe, ref, deployed) -> list[Alternative]:
    if not _crops(ref):
        return []
    return [Alternative(f"crop offsets rounded {r}", ROUNDING_CULPRIT, OFFSET_ROUNDING.table_of(r))
            for r in ("half_up", "half_even", "floor") if r != ref.crop.offset_rounding]


def describe(p, recipe: str = "") -> str:
    return f"center crop {list(p.crop.size)}, offsets rounded {p.crop.offset_rounding}"


OPERATION = Operation(
    "crop", Stage.CROP, (SIZE, OFFSET_ROUNDING), hint=f"size or offset rounding ({SIZE.path}, {OFFSET_ROUNDING.path})",
    alternatives=_alternatives, describe=describe)


@OPERATION.kernel("opencv")
def _numpy(image, p):
    if not _crops(p):
        return image
    top, left = offsets(p.crop, *image.shape[:2])
    return image[top:top + p.crop.size[0], left:left + p.crop.size[1]]


@OPERATION.kernel("torchvision")
@OPERATION.kernel("torch")
def _torchvision(image, p):
    """torchvision's ``CenterCrop`` (its offsets round half to even), or ``F.crop`` at the
    spec's offsets where they round otherwise; on a PIL image or a tensor."""
    if not _crops(p):
        return image
    from torchvision.transforms import functional as F  # the backend's own library, imported where its kernel runs

    if p.crop.offset_rounding in ("half_up", "floor"):
        width, height = F.get_image_size(image)
        return F.crop(image, *offsets(p.crop, height, width), *p.crop.size)
    return F.center_crop(image, list(p.crop.size))


@OPERATION.kernel("dali")
def _dali(image, p):
    """``fn.crop`` (offsets half up), or the offsets computed in the graph where they round otherwise."""
    if not _crops(p):
        return image
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs
    import nvidia.dali.types as types

    size = p.crop.size
    if p.crop.offset_rounding in ("auto", "half_up"):
        return fn.crop(image, crop_h=size[0], crop_w=size[1], crop_pos_x=0.5, crop_pos_y=0.5)
    from harness.operations.dali_nodes import rounded, sides

    h, w = sides(image)
    top = rounded((h - size[0]) / 2.0, p.crop.offset_rounding)
    left = rounded((w - size[1]) / 2.0, p.crop.offset_rounding)
    return fn.slice(image, fn.cast(fn.stack(top, left), dtype=types.FLOAT),
                    fn.cast(fn.stack(0.0 * h + size[0], 0.0 * w + size[1]), dtype=types.FLOAT),
                    axes=[0, 1], normalized_anchor=False, normalized_shape=False)
