"""The OpenCV implementation of the spec: the training-style CPU preprocessing.

Served by the ``preprocess_opencv`` model and replayed by the harness's ``opencv``
reference recipe: one implementation, so the two can only differ through the server.
"""

from __future__ import annotations

from typing import Iterable

import cv2
import numpy as np

from harness import operations
from harness.operations import decode as decode_operation
from harness.operations import resize_filter, resize_mode
from harness.preprocessing import PREPROCESS_STAGES, Step, run_steps
from harness.preprocessing.image_check import ImageError, check_resize, identify
from harness.spec import DecodeSpec, Preprocess, ResizeSpec, SpecError
from harness.stage import Stage


def check_supported(p: Preprocess, decode: bool = True) -> None:
    """Raise :class:`SpecError` for settings OpenCV cannot honour (rather than ignore them);
    ``decode=False`` when another decoder handles the decode options."""
    reason = operations.refusal("opencv", p) if decode else operations.refusal("opencv", p, but=(decode_operation.OPERATION,))
    if reason is not None:
        raise SpecError(reason)


def decode(data: np.ndarray | bytes, spec: DecodeSpec) -> np.ndarray:
    """File bytes -> HWC uint8 RGB (the image checked first), by the decode's OpenCV kernel."""
    kind = identify(data)
    buf = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).reshape(-1)
    rgb = decode_operation.with_cv2(buf, spec)
    if rgb is None:
        raise ImageError(f"corrupt {kind}: OpenCV could not decode it")
    return rgb


def resize(image: np.ndarray, spec: ResizeSpec) -> np.ndarray:
    """HWC -> HWC of ``spec.output_size`` (a detector's: before any padding), by the resize
    filter's kernel; float32 input or ``dtype = "float32"`` keeps fractions."""
    return resize_filter.OPERATION.kernels["opencv"](image, spec.output_size(*image.shape[:2]), spec)


def canvas(image: np.ndarray, p: Preprocess) -> np.ndarray:
    """The ``crop`` stage: the center crop, or a detector's model-input canvas (the letterbox's
    padding, ``cv2.copyMakeBorder`` in the pad value; a limit-side resize's image as it is: the
    crop's kernels pass a detector's image through)."""
    if p.resize.mode == "letterbox":
        top, bottom, left, right = resize_mode.letterbox_padding(*image.shape[:2], p.resize.detector())
        if not (top or bottom or left or right):
            return image
        value = (float(p.resize.pad_value),) * (image.shape[2] if image.ndim == 3 else 1)
        return cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=value)
    return operations.apply(Stage.CROP, "opencv", image, p)


def geometry(decoded: np.ndarray, p: Preprocess) -> np.ndarray:
    """A detector's ``GEOMETRY`` tensor for a decoded image (what :func:`resize` and
    :func:`canvas` do to it: the spec's arithmetic, as they use it); :class:`ImageError` for
    an image the resize refuses."""
    check_resize(*decoded.shape[:2], p.resize)
    return p.resize.geometry(*decoded.shape[:2]).to_tensor()


def normalize(image: np.ndarray, p: Preprocess) -> np.ndarray:
    """HWC RGB -> CHW float32 model input in the model's channel order."""
    return np.ascontiguousarray(operations.apply(Stage.INPUT, "opencv", image, p))


def _resize_checked(image: np.ndarray, p: Preprocess) -> np.ndarray:
    # Refuse, before cv2 tries, a resize that would exhaust memory (see check_resize).
    check_resize(*image.shape[:2], p.resize)
    return resize(image, p.resize)


STEPS: dict[Stage, Step] = {
    Stage.DECODE: lambda data, p: decode(data, p.decode),
    Stage.RESIZE: _resize_checked,
    Stage.CROP: canvas,
    Stage.INPUT: normalize,
}
"""Stage -> its OpenCV step ``(previous stage, spec) -> stage``: the served model, the
``opencv`` recipe and the isolated runs (:mod:`harness.deployed`) all go through it."""


def run(data: np.ndarray | bytes, p: Preprocess, stages: Iterable[str] = PREPROCESS_STAGES) -> dict[str, np.ndarray]:
    """The ``stages`` of one image (every stage up to the last of them is computed)."""
    wanted = set(stages)
    if not wanted:
        return {}
    last = max(wanted, key=PREPROCESS_STAGES.index)
    return {stage: x for stage, x in run_steps(STEPS, data, p, until=Stage(last)) if stage in wanted}
