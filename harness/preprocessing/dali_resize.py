"""The two detector resizes as DALI graph nodes, computed per sample from the decoded shape
inside the pipeline (as the Triton DALI backend needs: no Python in the served graph), with
the arithmetic of :mod:`harness.geometry`:

- :func:`limit_side`: the ratio in float64 as Python computes it (``int(h * ratio)`` sits on
  an integer for some sizes, where a float32 product could fall either side), ``floor``,
  then Python's ``round`` (ties to even) to the multiple, written with floor and a parity test;
- :func:`letterbox`: ``fn.resize`` to the rounded size, then ``fn.slice`` with a negative
  start and ``out_of_bounds_policy="pad"`` to place the padding where the spec says (centre
  or top-left), not ``fn.pad``, which pads only at the end (the bug of ultralytics #20573).

Resizes use bilinear without antialias and ``subpixel_scale=False``, like ``cv2.resize``
(within one level on uint8). Only operator arguments of DALI 2.1.1 are used (checked by the
tests with :func:`harness.preprocessing.dali_graph.missing_arguments`).
"""

from __future__ import annotations

import nvidia.dali.fn as fn
import nvidia.dali.math as dmath
import nvidia.dali.types as types

from harness.geometry import Letterbox, LimitSide
from harness.operations.dali_nodes import round_half_even as _round_half_even
from harness.operations.dali_nodes import sides as _sides


def _resize(image, height, width):
    return fn.resize(image, resize_y=fn.cast(height, dtype=types.FLOAT), resize_x=fn.cast(width, dtype=types.FLOAT),
                     interp_type=types.INTERP_LINEAR, antialias=False, subpixel_scale=False)


def limit_side_sizes(image, p: LimitSide):
    """(height, width) float64 nodes of the resized image."""
    h, w = _sides(image)
    if p.limits_longer_side:
        longer = dmath.max(h, w)
        ratio = 1.0 + (longer > p.limit_side_len) * (p.limit_side_len / longer - 1.0)
    else:
        shorter = dmath.min(h, w)
        ratio = 1.0 + (shorter < p.limit_side_len) * (p.limit_side_len / shorter - 1.0)
    scaled = [dmath.floor(side * ratio) for side in (h, w)]
    if p.max_side_limit is not None:  # PaddleOCR's cap on the longer side, truncated again
        longest = dmath.max(*scaled)
        cap = 1.0 + (longest > p.max_side_limit) * (float(p.max_side_limit) / longest - 1.0)
        scaled = [dmath.floor(side * cap) for side in scaled]
    return tuple(_round_half_even(side / p.multiple) * p.multiple for side in scaled)


def letterbox_sizes(image, p: Letterbox):
    """(height, width) float64 nodes of the image scaled to fit the letterbox, before padding."""
    h, w = _sides(image)
    target_h, target_w = (float(s) for s in p.size)
    r = dmath.min(target_h / h, target_w / w)
    if not p.scaleup:
        r = dmath.min(r, 1.0)
    return dmath.max(_round_half_even(h * r), 1.0), dmath.max(_round_half_even(w * r), 1.0)


def letterbox_padding(resized, p: Letterbox):
    """(top, bottom, left, right) float64 nodes of the padding around a resized image, as
    :func:`harness.geometry.letterbox_padding` computes it from its size."""
    new_h, new_w = _sides(resized)
    dh, dw = float(p.size[0]) - new_h, float(p.size[1]) - new_w
    if p.auto:
        dh, dw = dh - p.stride * dmath.floor(dh / p.stride), dw - p.stride * dmath.floor(dw / p.stride)
    if p.pads_after_only:
        top, left = 0.0 * dh, 0.0 * dw
    elif p.pad_rounding == "half_up":
        top, left = dmath.floor((dh + 1.0) / 2.0), dmath.floor((dw + 1.0) / 2.0)
    else:  # YOLO's round(d/2 - 0.1) for whole-pixel d: the floor of the half
        top, left = dmath.floor(dh / 2.0), dmath.floor(dw / 2.0)
    return top, dh - top, left, dw - left


def pad(resized, padding, p: Letterbox):
    """The letterbox canvas: ``resized`` placed at (top, left) of ``padding``, the rest ``p.pad_value``
    (``fn.slice`` with a negative start, so the padding lands before the image as well as after)."""
    new_h, new_w = _sides(resized)
    top, bottom, left, right = padding
    start = fn.cast(fn.stack(-top, -left), dtype=types.FLOAT)
    shape = fn.cast(fn.stack(new_h + top + bottom, new_w + left + right), dtype=types.FLOAT)
    return fn.slice(resized, start, shape, axes=[0, 1], normalized_anchor=False, normalized_shape=False,
                    out_of_bounds_policy="pad", fill_values=float(p.pad_value))


def no_padding(resized):
    """The padding of a resize that pads nothing (limit side), as nodes like :func:`letterbox_padding`'s."""
    h, _ = _sides(resized)
    zero = 0.0 * h
    return zero, zero, zero, zero


def geometry_tensor(decoded, resized, padding):
    """The ``GEOMETRY`` output: INT32 [8] source height, width, resized height, width, padding
    top, bottom, left, right (:meth:`harness.geometry.Geometry.from_tensor`): what
    the deployed preprocessing actually did, for the postprocessing to map boxes back with."""
    return fn.cast(fn.stack(*_sides(decoded), *_sides(resized), *padding), dtype=types.INT32)


def limit_side(image, p: LimitSide):
    """HWC image -> resized to :func:`~harness.geometry.limit_side_geometry`'s size."""
    height, width = limit_side_sizes(image, p)
    return _resize(image, height, width)


def letterbox(image, p: Letterbox):
    """HWC image -> letterboxed as :func:`~harness.geometry.letterbox_geometry` says."""
    resized = _resize(image, *letterbox_sizes(image, p))
    return pad(resized, letterbox_padding(resized, p), p)
