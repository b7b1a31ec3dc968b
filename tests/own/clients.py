"""Client-side preprocessing as a user's client script holds it: file bytes -> what the
server's model takes (``harness check --client tests/own/clients.py:NAME --model MODEL``).
Imports its sibling module the way a script does."""

import numpy as np
from image_prep import normalized_nhwc, pixels


def preprocess(data: bytes) -> np.ndarray:
    """For ``net`` (input ``pixels`` FP32 [3, 224, 224]): the normalized CHW image."""
    return np.ascontiguousarray(normalized_nhwc(data).transpose(2, 0, 1))


def preprocess_bgr(data: bytes) -> np.ndarray:
    """The same, with OpenCV's BGR array passed on as if RGB (the planted mistake)."""
    return np.ascontiguousarray(normalized_nhwc(data, channel_order="BGR").transpose(2, 0, 1))


def preprocess_scaled(data: bytes) -> dict:
    """For ``scaled_net`` (inputs ``image`` FP32 [3, 224, 224] on 0-255, ``scale_factor`` FP32 [1]):
    the CHW image and the factor the model multiplies it by before normalizing."""
    image = pixels(data).transpose(2, 0, 1).astype(np.float32)
    return {"image": np.ascontiguousarray(image), "scale_factor": np.array([1 / 255], np.float32)}


def preprocess_scaled_stretch(data: bytes) -> dict:
    """The same with a stretch to 224x224 instead of shorter side + center crop (the planted mistake)."""
    image = pixels(data, mode="stretch").transpose(2, 0, 1).astype(np.float32)
    return {"image": np.ascontiguousarray(image), "scale_factor": np.array([1 / 255], np.float32)}
