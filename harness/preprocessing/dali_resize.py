"""The two detector resizes as DALI graph nodes, computed per sample from the decoded shape
inside the pipeline (as the Triton DALI backend needs: no Python in the served graph), with
the arithmetic of :mod:`harness.geometry`:

- the sizes: the resize mode's DALI arithmetic (:data:`harness.operations.resize_mode.DALI_SIZES`:
  the ratio in float64 as Python computes it, ``int(h * ratio)`` sitting on an integer for some
  sizes where a float32 product could fall either side; Python's ``round``, ties to even,
  written with floor and a parity test);
- :func:`letterbox`: ``fn.resize`` to the rounded size, then ``fn.slice`` with a negative
  start and ``out_of_bounds_policy="pad"`` to place the padding where the spec says (centre
  or top-left), not ``fn.pad``, which pads only at the end (the bug of ultralytics #20573).

Resizes use the resize filter's DALI kernel with ``cv2.resize``'s own filter
(:data:`harness.operations.resize_filter.CV2_DEFAULT`: within one level on uint8). Only
operator arguments of DALI 2.1.1 are used (checked by the tests with
:func:`harness.preprocessing.dali_graph.missing_arguments`).
"""

from __future__ import annotations

import nvidia.dali.fn as fn
import nvidia.dali.types as types

from harness.geometry import Letterbox, LimitSide
from harness.operations import resize_filter, resize_mode
from harness.operations.dali_nodes import sides as _sides


def _resize(image, height, width):
    extent = dict(resize_y=fn.cast(height, dtype=types.FLOAT), resize_x=fn.cast(width, dtype=types.FLOAT))
    return resize_filter.OPERATION.kernels["dali"](image, extent, resize_filter.CV2_DEFAULT)


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
    """The padding of a resize that pads nothing (limit side), as nodes like
    :func:`~harness.operations.resize_mode.dali_letterbox_padding`'s."""
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
    return _resize(image, *resize_mode.DALI_SIZES["limit_side"](image, p))


def letterbox(image, p: Letterbox):
    """HWC image -> letterboxed as :func:`~harness.geometry.letterbox_geometry` says."""
    resized = _resize(image, *resize_mode.DALI_SIZES["letterbox"](image, p))
    return pad(resized, resize_mode.dali_letterbox_padding(resized, p), p)
