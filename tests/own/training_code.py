"""Training preprocessing as most teams hold it: code, not a spec (``harness diagnose
--reference tests/own/training_code.py:NAME``). Plain OpenCV and numpy, the arithmetic written
by hand the way training scripts write it."""

import cv2
import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _decoded(data: bytes) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("not an image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def train_transform(data: bytes) -> np.ndarray:
    """Shorter side to 256 with int() sizes, the center 224 at (H - 224) // 2, ImageNet mean/std."""
    image = _decoded(data)
    h, w = image.shape[:2]
    if h < w:
        size = (int(w * 256 / h), 256)
    else:
        size = (256, int(h * 256 / w))
    image = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    h, w = image.shape[:2]
    top, left = (h - 224) // 2, (w - 224) // 2
    x = (image[top:top + 224, left:left + 224].astype(np.float32) / 255 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def train_transform_with_gamma(data: bytes) -> np.ndarray:
    """The same after a gamma curve no spec can say: no recipe reproduces it."""
    x = train_transform(data)
    pixels = (x.transpose(1, 2, 0) * STD + MEAN).clip(0, 1) ** 0.8
    return np.ascontiguousarray(((pixels - MEAN) / STD).transpose(2, 0, 1).astype(np.float32))
