"""Reference-side JPEG decoding with libjpeg-turbo's own switches.

OpenCV and PIL always decode with libjpeg's defaults (fancy chroma upsampling, accurate
IDCT). To replay a training pipeline that did otherwise, or to test the hypothesis that the
deployed decoder does, JPEGs are decoded with simplejpeg (libjpeg-turbo with
``fastupsample`` and ``fastdct``), and EXIF orientation applied here.
"""

from __future__ import annotations

import io

import numpy as np

from harness.preprocessing.image_check import ImageError, identify
from harness.spec import DecodeSpec

# EXIF orientation tag value -> the numpy operation that shows the image upright.
_ORIENT = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: np.rot90(a, k=-1),
    7: lambda a: np.rot90(a, k=-1)[:, ::-1],
    8: lambda a: np.rot90(a, k=1),
}


def needs_libjpeg_switches(spec: DecodeSpec) -> bool:
    return not spec.fancy_upsampling or spec.fast_idct


def decode_with_switches(data: bytes, spec: DecodeSpec) -> np.ndarray | None:
    """HWC uint8 RGB if ``spec`` asks for non-default libjpeg switches on a JPEG, else None
    (the recipe's own decoder then decodes it)."""
    if not needs_libjpeg_switches(spec) or identify(data) != "JPEG":
        return None
    import simplejpeg

    try:
        rgb = simplejpeg.decode_jpeg(bytes(data), colorspace="RGB", fastdct=spec.fast_idct,
                                     fastupsample=not spec.fancy_upsampling)
    except ValueError as exc:
        raise ImageError(f"corrupt JPEG: libjpeg-turbo could not decode it ({exc})") from None
    if spec.exif_orientation:
        rgb = np.ascontiguousarray(_ORIENT.get(exif_orientation(data), lambda a: a)(rgb))
    return rgb


def open_rgb(data: bytes, exif_orientation: bool):
    """The file as a PIL RGB image, upright if ``exif_orientation`` (PIL itself ignores EXIF,
    as torchvision's ImageFolder does), or :class:`ImageError` saying why not."""
    from PIL import Image, ImageOps

    kind = identify(data)
    try:
        image = Image.open(io.BytesIO(bytes(data)))
        if exif_orientation:
            image = ImageOps.exif_transpose(image)
        return image.convert("RGB")
    except Exception as exc:  # PIL raises several types for corrupt files
        raise ImageError(f"corrupt {kind}: PIL could not decode it ({exc})") from None


def exif_orientation(data: bytes) -> int:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as image:
            return int(image.getexif().get(0x0112, 1))
    except Exception:  # no or broken EXIF: upright
        return 1
