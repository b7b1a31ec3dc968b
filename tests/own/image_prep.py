"""A user's own preprocessing, written the way deployments and clients commonly write it:
plain OpenCV and numpy, nothing of the harness. The tests' deployments (their Python-backend
models) and client functions run it; the training it must match is ``training.toml`` beside
this file (cv2 decode, shorter side 256 + center crop 224, ImageNet mean/std, RGB).

``channel_order`` "BGR" and ``mode`` "stretch" plant the two classic port mistakes: OpenCV's
BGR array fed on as if RGB, and a stretch to 224x224 instead of shorter side + center crop.
"""

from __future__ import annotations

import cv2
import numpy as np

SIZE, CROP = 256, 224
MEAN = (np.array([0.485, 0.456, 0.406]) * 255).astype(np.float32)
STD = (np.array([0.229, 0.224, 0.225]) * 255).astype(np.float32)


def decode(data: bytes, channel_order: str = "RGB") -> np.ndarray:
    """File bytes -> HWC uint8, RGB (or left as OpenCV's BGR)."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("cannot decode: not an image OpenCV reads")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB) if channel_order == "RGB" else bgr


def resize_crop(image: np.ndarray, mode: str = "shorter_side") -> np.ndarray:
    """Shorter side to 256 (sizes rounded half up) and the center 224x224, or a stretch to 224x224."""
    if mode == "stretch":
        return cv2.resize(image, (CROP, CROP), interpolation=cv2.INTER_LINEAR)
    height, width = image.shape[:2]
    scale = SIZE / min(height, width)
    height, width = int(height * scale + 0.5), int(width * scale + 0.5)
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
    top, left = int((height - CROP) / 2 + 0.5), int((width - CROP) / 2 + 0.5)
    return image[top:top + CROP, left:left + CROP]


def normalize(image: np.ndarray) -> np.ndarray:
    """HWC 0-255 -> HWC float32, ImageNet mean/std."""
    return (image.astype(np.float32) - MEAN) / STD


def pixels(data: bytes, channel_order: str = "RGB", mode: str = "shorter_side") -> np.ndarray:
    """File bytes -> the 224x224 HWC uint8 image."""
    return resize_crop(decode(data, channel_order), mode)


def normalized_nhwc(data: bytes, channel_order: str = "RGB", mode: str = "shorter_side") -> np.ndarray:
    """File bytes -> the normalized HWC float32 image."""
    return normalize(pixels(data, channel_order, mode))
