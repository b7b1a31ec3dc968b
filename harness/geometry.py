"""The resizes detectors are trained with, as pure geometry, and their OpenCV implementation.

Two families, each a frozen parameter record and a function of the source size alone, so
that every implementation (OpenCV here, DALI in :mod:`harness.preprocessing.dali_resize`, later
the spec's recipes) and the box back-mapping read one answer:

- :class:`LimitSide`: PaddleOCR's detector resize, as rapidocr's ``DetPreProcess.resize``
  replays it (scale so the shorter (``min``) or longer (``max``) side meets
  ``limit_side_len``, then round each side to a multiple of 32; no padding, so the aspect
  ratio moves a little);
- :class:`Letterbox`: YOLO's (scale to fit ``size`` keeping the aspect ratio, pad with
  ``pad_value``; ``auto`` pads only up to a multiple of ``stride``).

A :class:`Geometry` records what was applied; :meth:`Geometry.to_original` maps points of
the model input back to the source image's pixels (and a wrong record is a culprit of its
own: boxes shifted by the padding, or scaled by the wrong side).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.operations import resize_filter, resize_mode


class GeometryError(ValueError):
    """Parameters or an image size the resize cannot honour (one line, says which)."""


@dataclass(frozen=True)
class LimitSide:
    """PaddleOCR's detector resize (rapidocr 3.10.0 ``DetPreProcess``; defaults = rapidocr's
    detector config: 736, ``min``)."""

    limit_side_len: int = 736
    limit_type: Literal["min", "max"] = "min"
    """``min``: scale up until the shorter side is ``limit_side_len`` (never down);
    ``max``: scale down until the longer side is ``limit_side_len`` (never up)."""
    multiple: int = 32
    """Each side is rounded to a multiple of this (Python's ``round``: ties to even)."""
    max_side_limit: int | None = None
    """PaddleOCR's ``max_side_limit`` (its ``DetResizeForTest``; default there 4000): a resized
    image whose longer side exceeds it is scaled down to it (again truncated) before the
    rounding. None: no limit, as rapidocr's ``DetPreProcess`` (which shrinks photos to 2000
    before detecting instead)."""

    @property
    def limits_longer_side(self) -> bool:
        """``max``: the longer side is limited (shrunk to the length); ``min``: the shorter (enlarged)."""
        return self.limit_type == "max"

    def __post_init__(self):
        if self.limit_type not in ("min", "max"):
            raise GeometryError(f"limit_type must be 'min' or 'max', not {self.limit_type!r}")
        if self.limit_side_len <= 0 or self.multiple <= 0:
            raise GeometryError(f"limit_side_len and multiple must be positive (got {self.limit_side_len}, {self.multiple})")
        if self.max_side_limit is not None and self.max_side_limit <= 0:
            raise GeometryError(f"max_side_limit must be positive (got {self.max_side_limit})")


@dataclass(frozen=True)
class Letterbox:
    """YOLO's letterbox (the rule documented for ultralytics' ``LetterBox``: scale ``r =
    min(H / h, W / w)``, resized sides ``round(side * r)``, pad the rest)."""

    size: tuple[int, int] = (640, 640)
    """Target (height, width)."""
    pad_value: int = 114
    """The grey YOLO trains with."""
    pad_position: Literal["center", "top_left"] = "center"
    """``center``: split the padding between the two sides; ``top_left``: the image at the
    top left, all the padding at the bottom and right (what ``fn.pad`` gives in DALI: the
    port bug of ultralytics #20573)."""
    pad_rounding: Literal["yolo", "half_up"] = "yolo"
    """How an odd padding splits: ``yolo`` is ``round(d/2 - 0.1)`` before, ``round(d/2 +
    0.1)`` after (for whole-pixel paddings this is the floor of the half before, i.e. the
    odd pixel goes after; ports that floor the half agree with it); ``half_up`` puts the odd
    pixel before (``std::round(d/2)``, or a centred crop whose anchor rounds half up)."""
    stride: int = 32
    auto: bool = False
    """Pad only up to the next multiple of ``stride`` (a rectangle, not ``size``)."""
    scaleup: bool = True
    """False: never enlarge (only shrink), as YOLO validates."""

    @property
    def pads_after_only(self) -> bool:
        """All the padding at the bottom and right (``top_left``)."""
        return self.pad_position == "top_left"

    def __post_init__(self):
        if len(self.size) != 2 or min(self.size) <= 0:
            raise GeometryError(f"letterbox size must be (height, width), both positive: {self.size}")
        if self.pad_position not in ("center", "top_left"):
            raise GeometryError(f"pad_position must be 'center' or 'top_left', not {self.pad_position!r}")
        if self.pad_rounding not in ("yolo", "half_up"):
            raise GeometryError(f"pad_rounding must be 'yolo' or 'half_up', not {self.pad_rounding!r}")
        if not 0 <= self.pad_value <= 255 or self.stride <= 0:
            raise GeometryError(f"pad_value must be 0..255 and stride positive (got {self.pad_value}, {self.stride})")


Resize = LimitSide | Letterbox


@dataclass(frozen=True)
class Geometry:
    """What a resize did to one image: source size, resized size, padding, model input size."""

    source: tuple[int, int]
    """(height, width) of the source image."""
    resized: tuple[int, int]
    """(height, width) the image was resized to, before padding."""
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    """(top, bottom, left, right) pixels of padding."""

    @property
    def input(self) -> tuple[int, int]:
        """(height, width) of the model input."""
        top, bottom, left, right = self.pad
        return self.resized[0] + top + bottom, self.resized[1] + left + right

    @property
    def scale(self) -> tuple[float, float]:
        """(y, x) factors the source was scaled by: resized side / source side (per axis, since
        the sides are rounded separately)."""
        return self.resized[0] / self.source[0], self.resized[1] / self.source[1]

    def to_original(self, points: np.ndarray) -> np.ndarray:
        """Points ``[..., 2]`` (x, y) of the model input -> the same points in source pixels
        (continuous coordinates: a pixel's corners, not its centre, so 0 and the width map
        onto 0 and the width). Not clipped: a point in the padding maps outside the image."""
        points = np.asarray(points, np.float64)
        top, _, left, _ = self.pad
        # divide first, as rapidocr does (x / resized * source), so a rounding after agrees with it
        return np.stack([(points[..., 0] - left) / self.resized[1] * self.source[1],
                         (points[..., 1] - top) / self.resized[0] * self.source[0]], axis=-1)

    def to_input(self, points: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`to_original`: source pixels -> model input pixels."""
        points = np.asarray(points, np.float64)
        sy, sx = self.scale
        top, _, left, _ = self.pad
        return np.stack([points[..., 0] * sx + left, points[..., 1] * sy + top], axis=-1)

    def to_dict(self) -> dict:
        return {"source": list(self.source), "resized": list(self.resized), "pad": list(self.pad)}

    def to_tensor(self) -> np.ndarray:
        """INT32 [8]: source height, width, resized height, width, padding top, bottom, left,
        right: the ``GEOMETRY`` tensor the deployed preprocessing models answer."""
        return np.array([*self.source, *self.resized, *self.pad], np.int32)

    @staticmethod
    def from_tensor(values: np.ndarray) -> "Geometry":
        """The inverse of :meth:`to_tensor` (a ``GEOMETRY`` tensor read from a server); refuses
        one that does not describe a resize (wrong length, sides not positive, negative padding)."""
        v = np.asarray(values).reshape(-1)
        if v.size != 8 or not np.isfinite(v).all() or (v[:4] <= 0).any() or (v[4:] < 0).any():
            raise GeometryError(f"a GEOMETRY tensor holds 8 values: source height, width, resized height, width "
                                f"(positive), padding top, bottom, left, right (not negative); got {v.tolist()}")
        v = [int(x) for x in v]
        return Geometry((v[0], v[1]), (v[2], v[3]), (v[4], v[5], v[6], v[7]))

    @staticmethod
    def from_dict(d: dict) -> "Geometry":
        return Geometry(tuple(d["source"]), tuple(d["resized"]), tuple(d.get("pad", (0, 0, 0, 0))))


def limit_side_geometry(height: int, width: int, p: LimitSide) -> Geometry:
    """rapidocr's ``DetPreProcess.resize`` (the resize mode's arithmetic,
    :func:`harness.operations.resize_mode.limit_side_size`), refusing an image too thin for it."""
    _check_source(height, width)
    sides = resize_mode.limit_side_size(height, width, p)
    if min(sides) <= 0:
        raise GeometryError(f"a {width}x{height} image resizes to {sides[1]}x{sides[0]} with {p}: too thin for the detector")
    return Geometry((height, width), sides)


def letterbox_geometry(height: int, width: int, p: Letterbox) -> Geometry:
    """YOLO's letterbox as arithmetic (see :class:`Letterbox`)."""
    _check_source(height, width)
    resized = resize_mode.letterbox_size(height, width, p)
    return Geometry((height, width), resized, resize_mode.letterbox_padding(*resized, p))


def geometry(height: int, width: int, p: Resize) -> Geometry:
    """The geometry of either resize."""
    return limit_side_geometry(height, width, p) if isinstance(p, LimitSide) else letterbox_geometry(height, width, p)


def _check_source(height: int, width: int) -> None:
    if height <= 0 or width <= 0:
        raise GeometryError(f"cannot resize an empty image ({width}x{height})")


def resize_opencv(image: np.ndarray, p: Resize,
                  resize_with: resize_filter.Filter = resize_filter.CV2_DEFAULT) -> tuple[np.ndarray, Geometry]:
    """HWC image -> (model-input-sized HWC image, its geometry): the resize filter's OpenCV
    kernel (by default ``cv2.resize``'s own filter, as rapidocr and YOLO resize), then
    ``cv2.copyMakeBorder`` with the pad value."""
    import cv2  # here, not above: the spec reads this module's records inside the Triton container

    g = geometry(image.shape[0], image.shape[1], p)
    out = image
    if g.resized != tuple(image.shape[:2]):
        out = resize_filter.OPERATION.kernels["opencv"](image, g.resized, resize_with)
    if any(g.pad):
        top, bottom, left, right = g.pad
        value = (p.pad_value,) * (image.shape[2] if image.ndim == 3 else 1)
        out = cv2.copyMakeBorder(out, top, bottom, left, right, cv2.BORDER_CONSTANT, value=value)
    return out, g
