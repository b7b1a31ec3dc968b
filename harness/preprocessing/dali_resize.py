"""Resizes as DALI graph nodes, computed per sample from the decoded shape inside the
pipeline (as the Triton DALI backend needs: no Python in the served graph).

PIL's edges (:func:`renormalized`, a spec's ``resize.edges = "renormalize"``): ``fn.resize``
repeats the edge pixel where its filter reaches past the image; PIL cuts the filter at the
edge and rescales the weights left to sum to one, and rounds the image to uint8 between its
two passes (horizontal first, unless the height shrinks by more than twice as many pixels as
the width: Pillow 13). DALI has no argument for either, so the graph replays them: each
pass resizes the image padded with zeros beyond its edge (``fn.slice`` with
``out_of_bounds_policy="pad"``, the ROI the image itself, so the filter reads zeros past the
edge), and divides by the same resize of a row (or column) of ones padded alike, which is
the weight the filter kept inside the image; the first pass is rounded to the resize's
dtype before the second. On DALI 2.1.1's CPU kernels this matches PIL within one level
(bilinear, bicubic, Lanczos; docs/segmentation.md), where ``fn.resize`` alone differs by up to
22 levels in a 2-pixel frame and, for Lanczos and bicubic, by up to 6 levels inside where
PIL's intermediate rounding clips an overshoot.

The two detector resizes, with the arithmetic of :mod:`harness.geometry`:

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


FILTER_RADIUS = {types.INTERP_LINEAR: 1.0, types.INTERP_CUBIC: 2.0, types.INTERP_LANCZOS3: 3.0}
"""Half the support of each filter DALI resizes with, in output pixels (in input pixels when
enlarging); an antialiased shrink widens it by the scale."""


def renormalized(image, height, width, interp_type, antialias: bool, dtype):
    """``image`` (HWC) resized to ``height`` x ``width`` (numbers or float nodes) with PIL's
    edges and passes (see the module doc): with a uint8 ``dtype``, both orders of the passes
    are computed and each sample takes the one Pillow 13 runs (vertical first where the height
    shrinks by more than twice as many pixels as the width, ``Resample.c``); with float32 the
    order changes nothing but float rounding, and the horizontal pass goes first."""
    if interp_type not in FILTER_RADIUS:  # nearest: no filter reaches past the edge
        return fn.resize(image, resize_y=height, resize_x=width, interp_type=interp_type, antialias=antialias,
                         subpixel_scale=False, dtype=dtype)

    def one_pass(x, axis, size):
        return _renormalized_pass(x, axis, size, interp_type, antialias, dtype)

    horizontal_first = one_pass(one_pass(image, 1, width), 0, height)
    if dtype != types.UINT8:
        return horizontal_first
    vertical_first = one_pass(one_pass(image, 0, height), 1, width)
    h, w = _sides(image)
    taller = h - height
    vertical = fn.cast((taller > 0) & (taller > 2.0 * (w - width)), dtype=types.FLOAT)
    # DALI 2.1.1 has no per-sample select: a blend by 0 and 1 is exact
    chosen = fn.cast(horizontal_first, dtype=types.FLOAT) * (1.0 - vertical) + fn.cast(vertical_first,
                                                                                      dtype=types.FLOAT) * vertical
    return fn.cast(chosen, dtype=types.UINT8)


def _renormalized_pass(image, axis: int, size, interp_type, antialias: bool, dtype):
    """One pass of :func:`renormalized`: ``image`` resized to ``size`` along ``axis`` (0 rows, 1 columns)."""
    sides = _sides(image)
    length = sides[axis]
    radius = FILTER_RADIUS[interp_type]
    if antialias:
        radius = radius * dmath.max(length / size, 1.0)
    margin = dmath.ceil(radius) + 2.0  # zeros enough for the whole filter beyond each edge
    # the image, and a line of ones along the axis, each padded with zeros beyond both edges
    ones = fn.cast(image[0:1, :, 0:1] if axis == 1 else image[:, 0:1, 0:1], dtype=types.FLOAT) * 0.0 + 1.0
    resized = []
    for tensor, other in ((image, sides[1 - axis]), (ones, 1.0 + 0.0 * length)):
        padded = fn.slice(tensor, fn.cast(-margin, dtype=types.FLOAT), fn.cast(length + 2.0 * margin, dtype=types.FLOAT),
                          axes=[axis], normalized_anchor=False, normalized_shape=False, out_of_bounds_policy="pad",
                          fill_values=0.0)
        extent = (size, other) if axis == 0 else (other, size)
        start = (margin, 0.0 * margin) if axis == 0 else (0.0 * margin, margin)
        end = (margin + length, other) if axis == 0 else (other, margin + length)
        resized.append(fn.resize(padded, resize_y=fn.cast(extent[0], dtype=types.FLOAT),
                                 resize_x=fn.cast(extent[1], dtype=types.FLOAT),
                                 roi_start=fn.cast(fn.stack(*start), dtype=types.FLOAT),
                                 roi_end=fn.cast(fn.stack(*end), dtype=types.FLOAT), roi_relative=False,
                                 interp_type=interp_type, antialias=antialias, subpixel_scale=False,
                                 dtype=types.FLOAT))
    out = resized[0] / resized[1]  # the weight kept inside the image, broadcast over the other axis
    if dtype == types.UINT8:
        return fn.cast(dmath.clamp(out, 0.0, 255.0), dtype=types.UINT8)  # rounds to nearest
    return out


def shorter_side_sizes(image, size: int):
    """(height, width) float nodes of ``fn.resize(resize_shorter=size)``: the shorter side
    ``size``, the other scaled and rounded half up (:meth:`harness.spec.ResizeSpec.output_size`)."""
    h, w = _sides(image)
    scale = size / dmath.min(h, w)
    return tuple(fn.cast(dmath.max(dmath.floor(side * scale + 0.5), 1.0), dtype=types.FLOAT) for side in (h, w))


def limit_side_sizes(image, p: LimitSide):
    """(height, width) float64 nodes of the resized image."""
    h, w = _sides(image)
    if p.limit_type == "max":
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
    if p.pad_position == "top_left":
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
