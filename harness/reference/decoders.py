"""The reference recipes' decoders: the decode operation's PIL kernel and its libjpeg-turbo
kernel of the switches (:mod:`harness.operations.decode`), behind the image check.

OpenCV and PIL always decode with libjpeg's defaults (fancy chroma upsampling, accurate
IDCT). To replay a training pipeline that did otherwise, or to test the hypothesis that the
deployed decoder does, JPEGs are decoded with simplejpeg (libjpeg-turbo with
``fastupsample`` and ``fastdct``), and EXIF orientation applied here.
"""

from __future__ import annotations

import numpy as np

from harness.operations import decode
from harness.preprocessing.image_check import ImageError, identify
from harness.spec import DecodeSpec


def decode_with_switches(data: bytes, spec: DecodeSpec) -> np.ndarray | None:
    """HWC uint8 RGB if ``spec`` asks for non-default libjpeg switches on a JPEG, else None
    (the recipe's own decoder then decodes it)."""
    if not decode.libjpeg_switches(spec) or identify(data) != "JPEG":
        return None
    try:
        return decode.with_libjpeg(data, spec)
    except ValueError as exc:
        raise ImageError(f"corrupt JPEG: libjpeg-turbo could not decode it ({exc})") from None


def open_rgb(data: bytes, upright: bool):
    """The file as a PIL RGB image, upright (by its EXIF orientation) if ``upright`` (PIL itself
    ignores EXIF, as torchvision's ImageFolder does), or :class:`ImageError` saying why not."""
    kind = identify(data)
    try:
        return decode.with_pil(data, upright)
    except Exception as exc:  # PIL raises several types for corrupt files
        raise ImageError(f"corrupt {kind}: PIL could not decode it ({exc})") from None
