"""The two detector resizes as DALI graph nodes, computed per sample from the decoded shape
inside the pipeline (as the Triton DALI backend needs: no Python in the served graph), with
the arithmetic of :mod:`harness.detection.geometry`:

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

from harness.detection.geometry import Letterbox, LimitSide


def _sides(image):
    """(height, width) of an HWC image as float64 nodes."""
    shape = fn.cast(image.shape(), dtype=types.FLOAT64)
    return shape[0], shape[1]


def _round_half_even(x):
    """Python's ``round`` of a non-negative float64 node."""
    q = dmath.floor(x)
    r = x - q
    odd = q - 2.0 * dmath.floor(q / 2.0)
    return q + (r > 0.5) + (r == 0.5) * odd


def _resize(image, height, width):
    return fn.resize(image, resize_y=fn.cast(height, dtype=types.FLOAT), resize_x=fn.cast(width, dtype=types.FLOAT),
                     interp_type=types.INTERP_LINEAR, antialias=False, subpixel_scale=False)


def limit_side_sizes(image, p: LimitSide):
    """(height, width) float64 nodes of the resized image."""
    h, w = _sides(image)
    if p.limit_type == "max":
        longer = dmath.max(h, w)
        ratio = 1.0 + (longer > p.limit_side_len) * (p.limit_side_len / longer - 1.0)
    else:
        shorter = dmath.min(h, w)
        ratio = 1.0 + (shorter < p.limit_side_len) * (p.limit_side_len / shorter - 1.0)
    return tuple(_round_half_even(dmath.floor(side * ratio) / p.multiple) * p.multiple for side in (h, w))


def limit_side(image, p: LimitSide):
    """HWC image -> resized to :func:`~harness.detection.geometry.limit_side_geometry`'s size."""
    height, width = limit_side_sizes(image, p)
    return _resize(image, height, width)


def letterbox(image, p: Letterbox):
    """HWC image -> letterboxed as :func:`~harness.detection.geometry.letterbox_geometry` says."""
    h, w = _sides(image)
    target_h, target_w = (float(s) for s in p.size)
    r = dmath.min(target_h / h, target_w / w)
    if not p.scaleup:
        r = dmath.min(r, 1.0)
    new_h = dmath.max(_round_half_even(h * r), 1.0)
    new_w = dmath.max(_round_half_even(w * r), 1.0)
    dh, dw = target_h - new_h, target_w - new_w
    if p.auto:
        dh, dw = dh - p.stride * dmath.floor(dh / p.stride), dw - p.stride * dmath.floor(dw / p.stride)
    if p.pad_position == "top_left":
        top, left = 0.0 * dh, 0.0 * dw
    elif p.pad_rounding == "half_up":
        top, left = dmath.floor((dh + 1.0) / 2.0), dmath.floor((dw + 1.0) / 2.0)
    else:  # YOLO's round(d/2 - 0.1) for whole-pixel d: the floor of the half
        top, left = dmath.floor(dh / 2.0), dmath.floor(dw / 2.0)
    resized = _resize(image, new_h, new_w)
    start = fn.cast(fn.stack(-top, -left), dtype=types.FLOAT)
    shape = fn.cast(fn.stack(new_h + dh, new_w + dw), dtype=types.FLOAT)
    return fn.slice(resized, start, shape, axes=[0, 1], normalized_anchor=False, normalized_shape=False,
                    out_of_bounds_policy="pad", fill_values=float(p.pad_value))
