"""A real decoder difference for the cpu profile: the aligned training preprocessing, with
the JPEG's YCbCr -> RGB conversion done by Pillow instead of libjpeg-turbo.

Pillow decodes the file with the same libjpeg-turbo (accurate IDCT, fancy upsampling) but
asks it for YCbCr (``draft``) and converts with its own fixed-point arithmetic, which
rounds differently: up to 1 level on most pixels of colour photos (grayscale files are
untouched). nvJPEG's colour conversion and IDCT differ from libjpeg-turbo's in the same
way: an implementation, not a setting, so the decoder rule must read it ``close``
(docs/gpu.md has the figures)::

    harness check data/photos --reference specs/decoder_difference.py:pillow_ycbcr

Resize, crop and normalization are the aligned spec's OpenCV code, as in ``preprocess_opencv``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from harness.preprocessing import opencv
from harness.spec import SPEC_FILENAME, load_spec

SPEC = load_spec(Path(__file__).resolve().parents[1] / "model_repository" / SPEC_FILENAME).preprocess


def pillow_rgb(data: bytes) -> np.ndarray:
    """HWC uint8 RGB: libjpeg-turbo's YCbCr, Pillow's conversion, EXIF orientation applied."""
    image = Image.open(io.BytesIO(data))
    image.draft("YCbCr", image.size)  # full size: only the output colour space changes
    return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


def pillow_ycbcr(data: bytes) -> dict[str, np.ndarray]:
    """Every stage of the aligned recipe on :func:`pillow_rgb`'s pixels."""
    decoded = pillow_rgb(data)
    resized = opencv.resize(decoded, SPEC.resize)
    cropped = opencv.canvas(resized, SPEC)
    return {"decode": decoded, "resize": resized, "crop": cropped, "input": opencv.normalize(cropped, SPEC)}
