"""rembg's preprocessing and postprocessing as a user copies them into a deployment (plain PIL,
OpenCV and numpy, nothing of the harness): ``session_simple.py`` and ``session_base.py``.

``mode`` "planted": a hand port's two mistakes: OpenCV's linear resize (no antialias, where
PIL's LANCZOS antialiases) and ``/ 255`` (where rembg divides by the image's maximum).
"""

from __future__ import annotations

import io

import cv2
import numpy as np
from PIL import Image

SIZE = 320
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def model_input(data: bytes, mode: str = "aligned") -> np.ndarray:
    """File bytes -> float32 [1, 3, 320, 320], normalized."""
    if mode == "planted":
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError("cannot decode: not an image OpenCV reads")
        pixels = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
        pixels = pixels.astype(np.float64) / 255.0
    else:
        image = Image.open(io.BytesIO(data)).convert("RGB").resize((SIZE, SIZE), Image.LANCZOS)
        pixels = np.asarray(image, np.float64)
        pixels = pixels / np.max(pixels)
    return ((pixels - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)


def matte(prediction: np.ndarray) -> np.ndarray:
    """The map min-max rescaled to 0 to 1 ([H, W] float32)."""
    pred = np.asarray(prediction, np.float32).reshape(prediction.shape[-2:])
    lo, hi = pred.min(), pred.max()
    return ((pred - lo) / (hi - lo)).astype(np.float32) if hi > lo else np.zeros_like(pred)


def alpha(prediction: np.ndarray, data: bytes) -> np.ndarray:
    """rembg's matte: min-max, to uint8, back to the photo's size with LANCZOS ([H, W] uint8)."""
    size = Image.open(io.BytesIO(data)).size
    small = Image.fromarray((matte(prediction) * 255).astype(np.uint8), mode="L")
    return np.asarray(small.resize(size, Image.LANCZOS))
