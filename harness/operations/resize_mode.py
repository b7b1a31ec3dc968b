"""The resize mode (``[resize] mode`` with its size and its own keys): a classifier's shorter
side or stretch, a detector's letterbox (YOLO) or limit side (PaddleOCR).

It declares the mode's keys, the alternatives users get wrong (a stretch for a shorter side
and a crop, a letterbox's padding placement and rounding, a limit's type and length) with the
pairs of them diagnose tries together, its wording, and its kernels: the arithmetic of the
output size, one function per mode, in numbers (:data:`SIZES`: the spec's ``output_size``,
:mod:`harness.geometry`'s records, the recipes) and as DALI nodes (:data:`DALI_SIZES`, the
DALI graphs), and a letterbox's padding (:func:`letterbox_padding`, written once for numbers
and DALI nodes alike).
"""

from __future__ import annotations

import dataclasses
import math

from harness.operations.base import Alternative, Key, Operation
from harness.operations.crop import ROUNDING_CULPRIT as CROP_ROUNDING_CULPRIT
from harness.operations.crop import round_half_up
from harness.stage import Stage

MODES = ("shorter_side", "stretch", "letterbox", "limit_side")
DETECTOR_MODES = ("letterbox", "limit_side")
"""The resizes detectors train with (:mod:`harness.geometry`): they make the model input
themselves (padding included), so the spec has no crop and inputs vary in size."""
SIZE_ROUNDINGS = ("auto", "half_up", "floor")
PAD_POSITIONS = ("center", "top_left")
PAD_ROUNDINGS = ("yolo", "half_up")
LIMIT_TYPES = ("min", "max")


def _detector(p) -> bool:
    return p.resize.mode in DETECTOR_MODES


MODE = Key("resize", "mode", "shorter_side", MODES, "How the image is scaled (and, for a detector, padded).")
SIZE_ROUNDING = Key("resize", "size_rounding", "auto", SIZE_ROUNDINGS, "How the kept-aspect side's length rounds.")
PAD_POSITION = Key("resize", "pad_position", "center", PAD_POSITIONS, "Where a letterbox's padding goes.",
                   applies=_detector)
PAD_ROUNDING = Key("resize", "pad_rounding", "yolo", PAD_ROUNDINGS, "How an odd padding splits.", applies=_detector)
LIMIT_TYPE = Key("resize", "limit_type", "min", LIMIT_TYPES, "Which side a limit-side resize limits.",
                 applies=_detector)

LETTERBOX_PAD_VALUES = (114, 0, 128, 127)
"""Grey levels letterbox ports pad with: YOLO's 114, black, and mid-grey either way."""
LIMIT_SIDE_LENGTHS = (736, 960, 640, 1280, 480)
"""``limit_side_len`` values PaddleOCR's configs and ports use (736 rapidocr, 960 PaddleOCR's
det config, 640 and 1280 in YOLO-style ports, 480 for speed)."""


SIZE_ROUNDING_CULPRIT, LIMIT_TYPE_CULPRIT, LIMIT_LENGTH_CULPRIT = "output-size rounding", "limit type", "limit side length"
PAD_POSITION_CULPRIT, PAD_ROUNDING_CULPRIT = "letterbox pad position", "letterbox padding rounding"
"""The crop's offsets' rounding (diagnose's catalogue offers it): the partner of the sizes' rounding."""
PARTNERS = (
    (LIMIT_TYPE_CULPRIT, LIMIT_LENGTH_CULPRIT),  # PaddleOCR's limit type with its side length (det_limit_*)
    (SIZE_ROUNDING_CULPRIT, CROP_ROUNDING_CULPRIT),  # one library's rounding, of sizes and offsets alike
    (PAD_POSITION_CULPRIT, PAD_ROUNDING_CULPRIT),  # where the padding goes, and its odd pixel
)


def stretch(size) -> dict:
    """The ``[resize]`` keys of a stretch to ``size`` ([height, width])."""
    return {MODE.name: "stretch", "size": list(size)}


def scale(size: list[int]) -> dict:
    """The ``[resize]`` keys of torchvision's ``Resize(size)``: one side, the shorter side; two, a stretch."""
    return {MODE.name: "shorter_side", "size": size[0]} if len(size) == 1 else stretch(size)


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def _alternatives(recipe, ref, deployed) -> list[Alternative]:
    """A classifier's: another mode with its size, another rounding of the sizes; a detector's:
    where the padding goes and how it rounds, its grey, the stride and ``auto``, never
    enlarging, a plain stretch instead of the letterbox, the limit's type and length (the port
    bugs of ultralytics #20573, PaddleOCR #9116, ...)."""
    r = ref.resize
    if r.mode in DETECTOR_MODES:
        return _detector_alternatives(r, deployed)
    out = []
    crop = list(ref.crop.size)
    modes = [("stretch", crop), ("stretch", [r.size[0]] * 2), ("shorter_side", [256])]
    if deployed.resize != r:
        modes.append((deployed.resize.mode, list(deployed.resize.size)))
    for mode, size in modes:
        if (mode, tuple(size)) != (r.mode, r.size) and (mode != "shorter_side" or len(size) == 1):
            what = f"shorter side {size[0]} + center crop" if mode == "shorter_side" else f"stretch to {size[0]}x{size[-1]}"
            out.append(Alternative(f"resize mode: {what}", "resize mode", {"resize": {MODE.name: mode, "size": size}}))
    out += [Alternative(f"size rounding {rounding}", SIZE_ROUNDING_CULPRIT, SIZE_ROUNDING.table_of(rounding))
            for rounding in ("half_up", "floor") if rounding != r.size_rounding]
    return out


def _detector_alternatives(r, deployed) -> list[Alternative]:
    A, out = Alternative, []
    if r.mode == "letterbox":
        other = "top_left" if r.pad_position == "center" else "center"
        out.append(A(f"padding {'at the bottom and right' if other == 'top_left' else 'centred'}", PAD_POSITION_CULPRIT,
                     PAD_POSITION.table_of(other)))
        out += [A(f"padded with {v}", "letterbox pad value", {"resize": {"pad_value": v}})
                for v in LETTERBOX_PAD_VALUES if v != r.pad_value]
        rounding = "half_up" if r.pad_rounding == "yolo" else "yolo"
        out.append(A(f"odd padding pixel {'before' if rounding == 'half_up' else 'after'} the image",
                     PAD_ROUNDING_CULPRIT, PAD_ROUNDING.table_of(rounding)))
        out.append(A(f"auto {'off' if r.auto else 'on'} (padded {'to the full size' if r.auto else 'to the stride'})",
                     "letterbox stride/auto", {"resize": {"auto": not r.auto}}))
        out.append(A(f"scaleup {'off' if r.scaleup else 'on'}", "letterbox scaleup", {"resize": {"scaleup": not r.scaleup}}))
        size = [r.size[0], r.size[-1]]  # the stretched image is the model input: its crop takes all of it
        out.append(A(f"stretch to {size[0]}x{size[1]} instead of the letterbox", "stretch instead of letterbox",
                     {"resize": stretch(size), "crop": {"size": size}}))
    if r.mode == "limit_side":
        other = "max" if r.limit_type == "min" else "min"
        out.append(A(f"limit type {other}", LIMIT_TYPE_CULPRIT, LIMIT_TYPE.table_of(other)))
        lengths = [*LIMIT_SIDE_LENGTHS, *([deployed.resize.limit_side_len] if deployed.resize.mode == "limit_side" else [])]
        out += [A(f"limit side {n}", LIMIT_LENGTH_CULPRIT, {"resize": {"limit_side_len": n}})
                for n in dict.fromkeys(lengths) if n != r.limit_side_len]
    if deployed.resize != r and deployed.resize.mode in DETECTOR_MODES:
        out.append(A("the deployed spec's resize", "detector resize",
                     {"resize": {k: _plain(v) for k, v in dataclasses.asdict(deployed.resize).items()}}))
    return out


def describe(p, recipe: str = "") -> str:
    """The resize in words (``stretched to 224x224``, ``shorter side to 256``, a letterbox's
    padding, a limit's side)."""
    r = p.resize
    return {"stretch": f"stretched to {'x'.join(map(str, r.size))}", "shorter_side": f"shorter side to {r.size[0]}",
            "letterbox": f"letterboxed to {r.size[0]}x{r.size[-1]} (padded with {r.pad_value}, "
                         f"{'centred' if r.pad_position == 'center' else 'at the bottom and right'}"
                         + (f", to a multiple of {r.stride}" if r.auto else "") + ("" if r.scaleup else ", never enlarged")
                         + ")",
            "limit_side": f"{'shorter' if r.limit_type == 'min' else 'longer'} side limited to {r.limit_side_len}, "
                          f"sides multiples of {r.multiple}"}.get(r.mode, r.extent())


def crop_words(p) -> str:
    """``, center crop HxW`` where the mode crops after it (a detector's resize makes the model
    input itself: no crop to speak of; a stretch to the crop's size neither)."""
    r = p.resize
    return f", center crop {'x'.join(map(str, p.crop.size))}" if r.mode == "shorter_side" or (
        r.mode == "stretch" and tuple(p.crop.size) != tuple(r.size)) else ""


PADDING_WORDS = f"where it goes, its grey, its rounding, auto: {PAD_POSITION.path}, pad_value, pad_rounding, auto"
"""A letterbox's padding keys in words, for the hints of the stages it shows in."""

OPERATION = Operation(
    "resize mode", Stage.RESIZE, (MODE, SIZE_ROUNDING, PAD_POSITION, PAD_ROUNDING, LIMIT_TYPE),
    hint=(f"output-size rounding ({SIZE_ROUNDING.path}), resize on uint8 vs float, shorter-side vs stretch, or a "
          f"detector's limit type and length ({LIMIT_TYPE.path}, limit_side_len) or letterbox size and scaleup (resize.*)"),
    alternatives=_alternatives, describe=describe, partners=PARTNERS)


# -- the arithmetic: each mode's output size, one function per mode and backend ---------------
# In numbers (OpenCV, torchvision, the reference, harness.geometry's records) and as DALI graph
# nodes computed per sample (the served graph runs no Python), in float64 as Python computes.
# A function reads its mode's keys of a spec's [resize] table or of harness.geometry's record.


def shorter_side_size(height: int, width: int, r) -> tuple[int, int]:
    """The shorter side to ``r.size[0]`` exactly, the other scaled (``size * long / short``) and
    rounded as ``r.size_rounding`` says (``floor``: torchvision's int(); else half up, as DALI).
    (``short * (size / short)`` can fall below ``size`` in floating point: 694 * (256 / 694) is
    255.99..., which ``floor`` truncated to 255 where DALI and torchvision give 256.)"""
    size = r.size[0]
    rnd = int if r.size_rounding == "floor" else round_half_up  # DALI's; Python's round() goes half to even
    if height <= width:
        return size, max(1, rnd(size * width / height))
    return max(1, rnd(size * height / width)), size


def stretch_size(height: int, width: int, r) -> tuple[int, int]:
    """Exactly ``r.size`` (one side: a square)."""
    return (r.size[0], r.size[-1])


def letterbox_size(height: int, width: int, r) -> tuple[int, int]:
    """YOLO's: scaled to fit ``r.size`` keeping the aspect ratio (never enlarged without
    ``scaleup``), Python's round, before the padding."""
    ratio = min(r.size[0] / height, r.size[-1] / width)
    if not r.scaleup:
        ratio = min(ratio, 1.0)
    return (max(1, int(round(height * ratio))), max(1, int(round(width * ratio))))


def limit_side_size(height: int, width: int, r) -> tuple[int, int]:
    """rapidocr's ``DetPreProcess.resize`` (PaddleOCR's ``DetResizeForTest`` with its
    ``max_side_limit``): the ratio in float64, sides truncated (``int(h * ratio)``), capped (the
    longer side to ``max_side_limit``, truncated again), then ``round(side / multiple) * multiple``."""
    if r.limit_type == "max":
        ratio = r.limit_side_len / max(height, width) if max(height, width) > r.limit_side_len else 1.0
    else:
        ratio = r.limit_side_len / min(height, width) if min(height, width) < r.limit_side_len else 1.0
    scaled = [int(side * ratio) for side in (height, width)]
    if r.max_side_limit is not None and max(scaled) > r.max_side_limit:
        cap = float(r.max_side_limit) / max(scaled)
        scaled = [int(side * cap) for side in scaled]
    return tuple(int(round(side / r.multiple) * r.multiple) for side in scaled)


def letterbox_padding(height, width, r, floor=math.floor) -> tuple:
    """(top, bottom, left, right) padding around an image already resized to ``height`` x
    ``width`` by the letterbox ``r``: what is left of ``r.size`` (with ``auto``, of the next
    multiple of the stride), split as ``r`` says (``pad_position``, ``pad_rounding``). The one
    arithmetic of every backend: in numbers (ints: ``floor`` is ``math.floor``) or as DALI nodes
    (float64 sides, ``floor`` is ``nvidia.dali.math.floor``: :func:`dali_letterbox_padding`)."""
    dh, dw = r.size[0] - height, r.size[-1] - width
    if r.auto:  # the remainder of the stride (Python's %, written with floor for DALI's nodes)
        dh, dw = dh - r.stride * floor(dh / r.stride), dw - r.stride * floor(dw / r.stride)

    def split(total):
        if r.pads_after_only:
            before = 0 * total
        elif r.pad_rounding == "half_up":
            before = floor((total + 1) / 2)
        else:  # YOLO's round(total / 2 - 0.1), which for whole pixels is the floor of the half
            before = floor(total / 2)
        return before, total - before

    return (*split(dh), *split(dw))


def dali_letterbox_padding(resized, r) -> tuple:
    """:func:`letterbox_padding` of a resized image as float64 DALI nodes."""
    import nvidia.dali.math as dmath

    import harness.operations.dali_nodes as dali_nodes

    return letterbox_padding(*dali_nodes.sides(resized), r, floor=dmath.floor)


SIZES = {"shorter_side": shorter_side_size, "stretch": stretch_size, "letterbox": letterbox_size,
         "limit_side": limit_side_size}
"""Each mode's output size in numbers: ``(height, width, r) -> (height, width)``."""


@OPERATION.kernel("opencv")
@OPERATION.kernel("torchvision")
@OPERATION.kernel("torch")
def output_size(height: int, width: int, r) -> tuple[int, int]:
    """(height, width) after ``r``'s resize of an image of this size (a detector's: before its padding)."""
    return SIZES[r.mode](height, width, r)


def _dali_shorter_side(image, r):
    import nvidia.dali.math as dmath

    import harness.operations.dali_nodes as dali_nodes

    h, w = dali_nodes.sides(image)
    size = float(r.size[0])
    height_shorter = h <= w
    long_height = dali_nodes.rounded(size * h / w, r.size_rounding)
    long_width = dali_nodes.rounded(size * w / h, r.size_rounding)
    # the shorter side is `size`; the other is scaled (select by the comparison: 0 or 1)
    height = height_shorter * size + (1.0 - height_shorter) * long_height
    width = height_shorter * long_width + (1.0 - height_shorter) * size
    return dmath.max(height, 1.0), dmath.max(width, 1.0)


def _dali_stretch(image, r):
    import harness.operations.dali_nodes as dali_nodes  # imports DALI: only where a DALI kernel runs

    h, w = dali_nodes.sides(image)
    return 0.0 * h + float(r.size[0]), 0.0 * w + float(r.size[-1])


def _dali_letterbox(image, r):
    import nvidia.dali.math as dmath

    import harness.operations.dali_nodes as dali_nodes

    h, w = dali_nodes.sides(image)
    ratio = dmath.min(float(r.size[0]) / h, float(r.size[-1]) / w)
    if not r.scaleup:
        ratio = dmath.min(ratio, 1.0)
    return dmath.max(dali_nodes.round_half_even(h * ratio), 1.0), dmath.max(dali_nodes.round_half_even(w * ratio), 1.0)


def _dali_limit_side(image, r):
    import nvidia.dali.math as dmath

    import harness.operations.dali_nodes as dali_nodes

    h, w = dali_nodes.sides(image)
    if r.limit_type == "max":
        longer = dmath.max(h, w)
        ratio = 1.0 + (longer > r.limit_side_len) * (r.limit_side_len / longer - 1.0)
    else:
        shorter = dmath.min(h, w)
        ratio = 1.0 + (shorter < r.limit_side_len) * (r.limit_side_len / shorter - 1.0)
    scaled = [dmath.floor(side * ratio) for side in (h, w)]
    if r.max_side_limit is not None:  # PaddleOCR's cap on the longer side, truncated again
        longest = dmath.max(*scaled)
        cap = 1.0 + (longest > r.max_side_limit) * (float(r.max_side_limit) / longest - 1.0)
        scaled = [dmath.floor(side * cap) for side in scaled]
    return tuple(dali_nodes.round_half_even(side / r.multiple) * r.multiple for side in scaled)


DALI_SIZES = {"shorter_side": _dali_shorter_side, "stretch": _dali_stretch, "letterbox": _dali_letterbox,
              "limit_side": _dali_limit_side}
"""Each mode's output size as float64 DALI nodes of one image: ``(image, r) -> (height, width)``."""


@OPERATION.kernel("dali")
def dali_extent(image, r) -> dict:
    """``fn.resize``'s size arguments for ``r``'s resize of ``image``: DALI's own where it rounds
    as the spec says (``resize_shorter``, half up; a stretch's sizes), else the sizes computed
    per sample (:data:`DALI_SIZES`)."""
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    if not r.for_detector and r.size_rounding in ("auto", "half_up"):
        return dict(resize_y=r.size[0], resize_x=r.size[-1]) if r.mode == "stretch" else dict(resize_shorter=r.size[0])
    height, width = DALI_SIZES[r.mode](image, r)
    return dict(resize_y=fn.cast(height, dtype=types.FLOAT), resize_x=fn.cast(width, dtype=types.FLOAT))
