"""Cheap checks on encoded image bytes, so a bad file gets an error that names the problem.

Decoders report bad data poorly (DALI says ``nvImageCodec failure: '#4'``, OpenCV returns
None, libjpeg decodes a truncated file into a half-grey image), so every pipeline checks
the bytes first and, if a decoder still fails, wraps its message in :class:`ImageError`.
"""

from __future__ import annotations

import numpy as np

# File signatures of the formats both DALI's and OpenCV's decoders read.
_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"),
    (b"P1", "PNM"), (b"P2", "PNM"), (b"P3", "PNM"), (b"P4", "PNM"), (b"P5", "PNM"), (b"P6", "PNM"),
)


class ImageError(ValueError):
    """An input image cannot be decoded; the message says why, in one line."""


def image_bytes(data: np.ndarray | bytes) -> bytes:
    """The encoded file bytes, with the zero padding of a batched request removed.

    Clients batch files of different lengths into one [batch, max_len] UINT8 tensor by
    padding with zeros; decoders ignore bytes after the end of the image, but the checks
    below must not mistake the padding for content.
    """
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    return raw.rstrip(b"\x00")


def identify(data: bytes) -> str:
    """The image format of ``data`` (padding already stripped), or :class:`ImageError`."""
    if not data:
        raise ImageError("empty image: the request holds 0 bytes of image data")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    for signature, name in _SIGNATURES:
        if data.startswith(signature):
            if name == "JPEG":
                _check_jpeg_complete(data)
            return name
    raise ImageError(f"not an image: unrecognized file signature {_describe_head(data)}")


def _check_jpeg_complete(data: bytes) -> None:
    # A complete JPEG ends its last scan (SOS, FF DA) with an EOI marker (FF D9). Inside
    # entropy-coded data every FF byte is stuffed, so an FF D9 after the last SOS is the
    # real end; an EXIF thumbnail's own EOI sits before the main image's SOS.
    last_scan = data.rfind(b"\xff\xda")
    if last_scan < 0:
        raise ImageError(f"corrupt JPEG: no image data (no start-of-scan marker) in {len(data)} bytes")
    if data.rfind(b"\xff\xd9") < last_scan:
        raise ImageError(f"truncated JPEG: the file ends after {len(data)} bytes without an end-of-image marker")


def _describe_head(data: bytes) -> str:
    head = data[:8]
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in data[:64]) == min(len(data), 64)
    kind = "; looks like text" if printable else ""
    return f"(first bytes {head.hex(' ')}{kind}, {len(data)} bytes)"
