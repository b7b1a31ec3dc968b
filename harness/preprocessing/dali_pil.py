"""PIL's resize with DALI's kernels (``resize.resampling = "pil"``), and the crop offsets of the
libraries that round otherwise than DALI, computed per sample in the graph (their sizes are the
resize mode's, :data:`harness.operations.resize_mode.DALI_SIZES`).

Why DALI's own filtered resize differs from PIL's (and from torchvision's low-passed
tensor resize, which follows PIL), measured on the 65 corpus photos at 224 shorter side:

- **the edges**: where the filter reaches past the image, PIL drops those taps and divides by
  the weight of the taps left (``Resample.c``, ``precompute_coeffs``); DALI (as OpenCV) repeats
  the edge pixel. That moves a frame of about ``support`` pixels by up to 19 levels (bilinear).
  Replayed here by resizing the image zero-padded beside a channel of ones (zero-padded the
  same way) over the region of the original image (``roi_start``/``roi_end``), then dividing
  by that channel: the sum of the taps inside over their weight, which is PIL's.
- **the intermediate**: PIL resizes an 8-bit image along one axis, rounds and clips it to 8
  bits, then along the other; DALI filters both axes in float. A cubic or Lanczos filter
  overshoots at sharp edges, and clipping in between moves those pixels by up to 22 levels.
  Replayed by two resizes, one axis each, rounded and clipped to 8 bits in between
  (``dtype = "uint8"`` only: torchvision's float resize has no such step), **in Pillow's
  order**: Pillow 13 goes vertically first where the height shrinks by more than twice as many
  pixels as the width (a stretch of a portrait photo to a square, a tall one to a shorter
  side), horizontally first otherwise (:func:`vertical_first`). Both orders are computed and
  each sample takes Pillow's: the graph cannot know the decoded size before it runs.

With both, DALI (CPU) is within 1 level of PIL everywhere on those photos for linear, and
within 2 levels (on 2e-5 of the values) for cubic and Lanczos: what is left is PIL's fixed-point
(22-bit) filter coefficients. The same graph runs on the GPU (``mixed``): every operator and
argument here is in DALI 2.1.1's schema (``tests/preprocessing/test_dali_pil.py``).
"""

from __future__ import annotations

import nvidia.dali.fn as fn
import nvidia.dali.math as dmath
import nvidia.dali.types as types

from harness.operations import resize_filter
from harness.operations.dali_nodes import sides as _sides
from harness.spec import ResizeSpec


def _filtered(image, height, width, axis: int, interpolation: str):
    """``image`` (float HWC, 3 channels) resized along ``axis`` (0 rows, 1 columns) to ``height``
    x ``width`` with PIL's edges: zero padding beside a channel of ones, the region of the image
    resized, divided by the ones' result. Float."""
    h, w = _sides(image)
    source, target = (h, height) if axis == 0 else (w, width)
    pad = dmath.ceil(resize_filter.SUPPORT[interpolation] * dmath.max(source / target, 1.0)) + 1.0
    ones = image[:, :, 0:1] * 0.0 + 1.0
    weighted = fn.cat(image, ones, axis=2)
    zero = 0.0 * h
    pads = (pad, zero) if axis == 0 else (zero, pad)
    padded = fn.slice(weighted, fn.cast(fn.stack(-pads[0], -pads[1]), dtype=types.FLOAT),
                      fn.cast(fn.stack(h + 2.0 * pads[0], w + 2.0 * pads[1]), dtype=types.FLOAT),
                      axes=[0, 1], normalized_anchor=False, normalized_shape=False, out_of_bounds_policy="pad",
                      fill_values=0.0)
    extent = dict(resize_y=fn.cast(height, dtype=types.FLOAT), resize_x=fn.cast(width, dtype=types.FLOAT),
                  roi_start=fn.cast(fn.stack(pads[0], pads[1]), dtype=types.FLOAT),
                  roi_end=fn.cast(fn.stack(pads[0] + h, pads[1] + w), dtype=types.FLOAT), roi_relative=False)
    out = resize_filter.OPERATION.kernels["dali"](padded, extent, resize_filter.pil_pass(interpolation))
    return out[:, :, 0:3] / out[:, :, 3:4]


def _to_uint8(image):
    """Rounded half up and clipped to 0-255, as PIL's ``clip8`` (exact, whatever the cast rounds)."""
    return fn.cast(dmath.clamp(dmath.floor(image + 0.5), 0.0, 255.0), dtype=types.UINT8)


def resize(image, spec: ResizeSpec, height, width):
    """HWC uint8 RGB -> resized to ``height`` x ``width`` (float nodes) as PIL resizes it:
    ``uint8`` through an 8-bit image between its two passes, in Pillow's order (:func:`vertical_first`),
    ``float32`` in float passes (whose order changes only float rounding)."""
    x = fn.cast(image, dtype=types.FLOAT)
    h, w = _sides(x)
    if spec.dtype == "float32":
        rows = _filtered(x, h, width, 1, spec.interpolation)
        return _filtered(rows, height, width, 0, spec.interpolation)
    across = _to_uint8(_filtered(x, h, width, 1, spec.interpolation))
    across = _to_uint8(_filtered(fn.cast(across, dtype=types.FLOAT), height, width, 0, spec.interpolation))
    down = _to_uint8(_filtered(x, height, w, 0, spec.interpolation))
    down = _to_uint8(_filtered(fn.cast(down, dtype=types.FLOAT), height, width, 1, spec.interpolation))
    # each sample takes Pillow's order: DALI 2.1.1 has no per-sample select, and a blend by 0 and 1 is exact
    first = fn.cast(vertical_first(h, w, height, width), dtype=types.FLOAT)
    return fn.cast(fn.cast(across, dtype=types.FLOAT) * (1.0 - first) + fn.cast(down, dtype=types.FLOAT) * first,
                   dtype=types.UINT8)


def vertical_first(h, w, height, width):
    """Whether Pillow 13 resizes an image of ``h`` x ``w`` to ``height`` x ``width`` vertically first
    (``Resample.c``, ``ImagingResampleInner``: when the height shrinks by more than twice as many
    pixels as the width); horizontally first otherwise, as Pillow always did before 13. Nodes or
    numbers. With an 8-bit intermediate the order matters: a Lanczos overshoot clipped after the
    first pass differs by up to 16 levels between the two (opencv-doc's ``ellipses.jpg`` at 320x320)."""
    taller = h - height
    return (taller > 0) & (taller > 2.0 * (w - width))
