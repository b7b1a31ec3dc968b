"""Segmentation's postprocessings: one image's raw map to its result at the source size.

The result (the ``postprocess`` stage) is one float32 array [2, H, W]: the matte (0 to 1;
the saliency's uint8 matte / 255, an argmax's winning probability) and the mask (0/1, or
class indices). The served ``segment_postprocess`` model and the harness's reference run
this same code with their spec's ``[postprocess]`` table (:mod:`harness.postprocessing`).

PIL resizes, as rembg does (``Image.resize`` of the uint8 matte with LANCZOS): PIL's filters
low-pass when shrinking, which cv2's do not.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from harness.operations import resize_filter
from harness.postprocessing import ArgmaxParams, SaliencyParams, parameters

MATTE, MASK = 0, 1
"""The result's two planes."""
POSTPROCESSINGS = ("saliency", "argmax")
"""The segmentation postprocessings' names (their records: :data:`harness.postprocessing.PARAMETERS`)."""


def _filter(name: str):
    from PIL import Image

    return getattr(Image, resize_filter.PIL[name])


def _plane(output: np.ndarray, planes: int | None = 1) -> np.ndarray:
    """The raw output without its leading axes of one: [H, W] (``planes`` 1) or [C, H, W] (None)."""
    array = np.asarray(output, np.float32)
    while array.ndim > (2 if planes == 1 else 3) and array.shape[0] == 1:
        array = array[0]
    if planes == 1 and array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    want = "[1, H, W] map" if planes == 1 else "[C, H, W] logits"
    if array.ndim != (2 if planes == 1 else 3) or 0 in array.shape:
        hint = (" (C-class logits: the spec's [postprocess] name = \"argmax\")" if planes == 1 and array.ndim == 3
                else "")
        raise ValueError(f"a segmentation output must be a {want}, got {list(np.shape(output))}{hint}")
    if not np.isfinite(array).all():
        raise ValueError(f"the segmentation output holds {int((~np.isfinite(array)).sum())} non-finite values "
                         "(NaN or infinity)")
    return array


def _resize(array: np.ndarray, size: tuple[int, int], interpolation: str) -> np.ndarray:
    """A uint8 or float32 [h, w] plane to ``size`` (height, width) by PIL."""
    from PIL import Image

    height, width = size
    if array.shape == (height, width):
        return array
    mode = "L" if array.dtype == np.uint8 else "F"
    return np.asarray(Image.fromarray(array, mode).resize((width, height), _filter(interpolation)))


def saliency(output: np.ndarray, size: tuple[int, int], p: SaliencyParams) -> np.ndarray:
    """rembg's postprocessing (min-max, x 255 truncated to uint8, back to ``size``), then the mask."""
    pred = _plane(output)
    if p.minmax:
        lo, hi = pred.min(), pred.max()
        pred = (pred - lo) / (hi - lo) if hi > lo else np.zeros_like(pred)
    matte = _resize((np.clip(pred, 0, 1) * 255).astype(np.uint8), size, p.interpolation).astype(np.float32) / 255
    if p.threshold_after_upsampling:
        mask = matte > p.threshold
    else:
        mask = _resize((pred > p.threshold).astype(np.uint8), size, "nearest") > 0
    return np.stack([matte, mask.astype(np.float32)])


def argmax(output: np.ndarray, size: tuple[int, int], p: ArgmaxParams) -> np.ndarray:
    """C-class logits to the winning class per source pixel and its softmax probability."""
    logits = _plane(output, planes=None)
    if p.threshold_after_upsampling:
        logits = np.stack([_resize(np.ascontiguousarray(c), size, p.interpolation) for c in logits])
    e = np.exp(logits - logits.max(axis=0, keepdims=True))
    prob = e / e.sum(axis=0, keepdims=True)
    mask, matte = logits.argmax(axis=0).astype(np.float32), prob.max(axis=0).astype(np.float32)
    if not p.threshold_after_upsampling:
        mask = _resize(mask, size, "nearest")
        matte = _resize(matte, size, "nearest")
    return np.stack([matte, mask])


def from_matte(matte: np.ndarray, size: tuple[int, int], model_size: tuple[int, int] | None,
               p: SaliencyParams) -> np.ndarray:
    """A deployment's matte alone (0 to 1, [h, w]) as the result [2, H, W]: its mask the matte
    above ``p.threshold``. At the source ``size`` as it is; at the model's (``model_size``,
    another) brought to ``size`` as the saliency brings its matte there (``p.interpolation``,
    the threshold before or after); at any other size left there (a result of the wrong size)."""
    matte = np.asarray(matte, np.float32)
    size = (int(size[0]), int(size[1]))
    if matte.shape == size or model_size is None or matte.shape != tuple(model_size):
        return np.stack([matte, (matte > p.threshold).astype(np.float32)])
    levels = matte * 255
    if np.abs(levels - np.rint(levels)).max(initial=0) < 1e-3:  # a uint8 matte: resized as the saliency resizes it
        up = _resize(np.rint(levels).astype(np.uint8), size, p.interpolation).astype(np.float32) / 255
    else:
        up = np.clip(_resize(np.ascontiguousarray(matte), size, p.interpolation), 0, 1)
    if p.threshold_after_upsampling:
        mask = up > p.threshold
    else:
        mask = _resize((matte > p.threshold).astype(np.uint8), size, "nearest") > 0
    return np.stack([up.astype(np.float32), mask.astype(np.float32)])


class SegmentationPostprocess:
    """A built-in postprocessing from its ``[postprocess]`` table: ``(outputs by name, source
    size) -> [2, H, W]``."""

    def __init__(self, table: Mapping):
        self.params = parameters(table)
        if not isinstance(self.params, (SaliencyParams, ArgmaxParams)):
            raise ValueError(f"[postprocess] {table.get('name')!r} is not a segmentation postprocessing "
                             "(saliency, argmax)")
        self.table = dict(table)

    def __call__(self, outputs: Mapping[str, np.ndarray], size: tuple[int, int]) -> np.ndarray:
        output = raw_output(outputs, self.params.output)
        size = (int(size[0]), int(size[1]))
        if min(size) < 1:
            raise ValueError(f"a source size of {size[1]}x{size[0]} has no pixels")
        check_output_size(size, self.params.max_output_pixels)
        run = saliency if isinstance(self.params, SaliencyParams) else argmax
        return run(output, size, self.params)


def check_output_size(size: tuple[int, int], ceiling: int) -> None:
    """ValueError naming the ceiling when a matte and mask at the source ``size`` (H, W) would hold
    more than ``ceiling`` pixels (the spec's ``[postprocess] max_output_pixels``): one request's
    answer and memory stay bounded (a 13376 x 13376 photo's were 895 MB, the server +4 GB)."""
    height, width = size
    if height * width > ceiling:
        raise ValueError(f"the mask of a {width}x{height} photo ({height * width / 1e6:.0f} megapixels) would exceed "
                         f"the {ceiling / 1e6:.1f} megapixels the spec's [postprocess] max_output_pixels allows: send "
                         "a smaller photo, or raise it")


def raw_output(outputs: Mapping[str, np.ndarray], name: str | None = None) -> np.ndarray:
    """The raw output a postprocessing reads: ``name`` where given and answered, else the only one."""
    if name is not None and name in outputs:
        return outputs[name]
    if len(outputs) == 1:
        return next(iter(outputs.values()))
    raise ValueError(f"[postprocess] output {name!r} is not among the outputs {', '.join(outputs)}")


def as_result(matte, mask, size: tuple[int, int], who: str) -> np.ndarray:
    """A user's matte and mask as the result [2, H, W] at ``size``, or a ValueError saying what is wrong."""
    planes = []
    for what, plane in (("matte", matte), ("mask", mask)):
        array = np.asarray(plane)
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise ValueError(f"{who}: its {what} is not numbers ({array.dtype})")
        array = array.astype(np.float32)
        while array.ndim > 2 and array.shape[0] == 1:
            array = array[0]
        if array.shape != tuple(size):
            raise ValueError(f"{who}: its {what} is {list(np.shape(plane))}, not the source size "
                             f"{size[1]}x{size[0]} ([{size[0]}, {size[1]}])")
        if not np.isfinite(array).all():
            raise ValueError(f"{who}: its {what} holds {int((~np.isfinite(array)).sum())} non-finite values")
        planes.append(array)
    if planes[0].max(initial=0) > 1.0 + 1e-6:  # a uint8 matte: 0 to 255
        planes[0] = planes[0] / 255.0
    return np.stack(planes)


def is_segmentation(table: Mapping | None) -> bool:
    return bool(table) and table.get("name") in POSTPROCESSINGS
