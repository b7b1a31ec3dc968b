"""Cheap checks on encoded image bytes, so a bad file gets an error that names the problem.

Decoders report bad data poorly (DALI says ``nvImageCodec failure: '#4'``, OpenCV returns
None, libjpeg decodes a truncated file into a half-grey image), so every pipeline checks
the bytes first and, if a decoder still fails, wraps its message in :class:`ImageError`.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import simplejpeg
from PIL import Image, UnidentifiedImageError

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.spec import ResizeSpec

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


MAX_PIXELS = 2 * Image.MAX_IMAGE_PIXELS
"""Images whose header declares more pixels are refused before any decoder allocates them
(a 65500x65500 header asks for 12 GiB). The same point where PIL refuses (about 179
megapixels), so the PIL-based training recipes and the deployment agree on what is too big."""


class ImageError(HarnessError, ValueError):
    """An input image cannot be decoded; the message says why, in one line."""


def image_bytes(data: np.ndarray | bytes) -> bytes:
    """The encoded file bytes, with the zero padding of a batched request removed.

    Clients batch files of different lengths into one [batch, max_len] UINT8 tensor by
    padding with zeros; decoders ignore bytes after the end of the image, but the checks
    below must not mistake the padding for content.
    """
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    return raw.rstrip(b"\x00")


@dataclass(frozen=True)
class _Header:
    """What PIL read of an image's header (no pixels decoded)."""

    width: int
    height: int
    mode: str
    tiles: list


def identify(data: bytes) -> str:
    """The image format of ``data`` (padding already stripped), or :class:`ImageError`."""
    return _identify(data)[0]


def _identify(data: bytes) -> tuple[str, _Header | None]:
    # The format, and its header as read while checking it (None for WebP, not checked here).
    if not data:
        raise ImageError("empty image: the request holds 0 bytes of image data")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP", None
    for signature, name in _SIGNATURES:
        if data.startswith(signature):
            if name == "JPEG":
                _check_jpeg_complete(data)
            header = _read_header(data, name)
            _check_data_evidence(data, name, header)
            return name, header
    raise ImageError(f"not an image: unrecognized file signature {_describe_head(data)}")


VALIDATIONS = ("header", "decode")


def validate(data: np.ndarray | bytes, level: str = "decode", resize: ResizeSpec | None = None) -> str:
    """The format of ``data`` (one request row: the file, maybe zero padded) if a decoder can
    be expected to decode it, else :class:`ImageError`.

    ``header`` is :func:`identify`: signature, JPEG structure, declared dimensions (about
    0.1 ms). It cannot see damage a decoder meets only while decoding, such as a corrupt
    Huffman or quantization table. ``decode`` also decodes JPEGs with libjpeg-turbo at 1/8
    size (about 1.1 ms for a 640x480 photo, three quarters of a full decode: the entropy
    decoding dominates). Decoder *warnings* (damaged scan data, which libjpeg and DALI
    decode into a damaged image) are not errors here, as they are not for the pipelines.
    Other formats are rare enough to be decoded in full by PIL. With ``resize`` (the spec's),
    an image the resize would blow up beyond :data:`MAX_PIXELS` is refused too (a 1x65500
    JPEG is 65500 pixels; shorter side to 256, it would be 256x16768000).
    """
    if level not in VALIDATIONS:
        raise ValueError(f"validation level must be one of {VALIDATIONS}, got {level!r}")
    # Decoders get the row as the pipeline will: padding included. Stripped, a BMP whose
    # last pixels are black would look truncated; decoders stop at the image's own end.
    data = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    kind, header = _identify(image_bytes(data))
    header = header or _read_header(data, kind)  # a WebP: PIL reads its whole stream, padding included
    if resize is not None:
        check_resize(header.height, header.width, resize)
    _check_pixel_data_size(header, len(data), kind)
    if level == "decode":
        try:
            if kind == "JPEG":
                height, width, _, _ = simplejpeg.decode_jpeg_header(data)
                simplejpeg.decode_jpeg(data, min_height=max(1, height // 8), min_width=max(1, width // 8), strict=False)
            else:
                with warnings.catch_warnings(), Image.open(io.BytesIO(data)) as im:
                    warnings.simplefilter("ignore")
                    im.load()
        except (OSError, ValueError, SyntaxError) as exc:  # what simplejpeg and PIL raise for broken data
            raise ImageError(f"corrupt {kind}: {exc}") from None
    return kind


def check_resize(height: int, width: int, resize: ResizeSpec) -> None:
    """:class:`ImageError` when the spec's resize would make more than :data:`MAX_PIXELS`
    pixels of a ``height`` x ``width`` image: a 1x65500 image passes every decoder's pixel
    limit, but its shorter side resized to 256 is 256x16.8M pixels (12 GiB), which no
    ``MemoryError`` announces: the process is killed."""
    if resize.for_detector:
        return _check_detector_resize(height, width, resize)
    out_height, out_width = resize.output_size(height, width)
    if out_height * out_width > MAX_PIXELS:
        raise ImageError(f"image too elongated: resizing its {width}x{height} pixels as the spec says makes "
                         f"{out_width}x{out_height} ({out_width * out_height / 1e6:.0f} megapixels; the limit "
                         f"is {MAX_PIXELS / 1e6:.0f})")


def _check_detector_resize(height: int, width: int, resize: ResizeSpec) -> None:
    """A detector's resize: an image too thin to keep a side, or whose model input would be
    longer than the deployment takes (``resize.max_side``, its engine's profile), is refused."""
    from harness.geometry import GeometryError

    try:
        g = resize.geometry(height, width)
    except GeometryError as exc:
        raise ImageError(f"image too elongated for the detector's resize: {exc}") from None
    longest = max(g.input)
    if resize.mode == "limit_side" and longest > resize.max_side:
        raise ImageError(f"image too elongated: the {resize.mode} resize makes its {width}x{height} pixels a "
                         f"{g.input[1]}x{g.input[0]} model input, longer than the {resize.max_side} pixels the "
                         "deployment takes (resize.max_side)")
    if g.input[0] * g.input[1] > MAX_PIXELS:
        raise ImageError(f"image too large: its model input would be {g.input[1]}x{g.input[0]}")


_BITS_PER_PIXEL = {"1": 1, "L": 8, "P": 8, "RGB": 24, "RGBA": 32, "CMYK": 32}


def _check_pixel_data_size(header: _Header, size: int, kind: str) -> None:
    # Uncompressed formats (BMP, PNM, plain TIFF) say where their pixels start and how many
    # there are: a file shorter than that is refused here, before a decoder reads past its
    # end (DALI's BMP decoder crashes the process on a BMP whose header claims 160x131232).
    for tile in header.tiles:
        if tile.codec_name != "raw":
            continue
        x0, y0, x1, y1 = tile.extents
        stride = tile.args[1] if isinstance(tile.args, tuple) and len(tile.args) > 1 else 0
        if not stride and header.mode in _BITS_PER_PIXEL:
            stride = -(-(x1 - x0) * _BITS_PER_PIXEL[header.mode] // 8)
        needed = tile.offset + abs(stride) * (y1 - y0)
        if stride and needed > size:
            raise ImageError(f"truncated {kind}: its header declares {header.width}x{header.height} pixels in "
                             f"{needed} bytes, the file has {size}")


def _read_header(data: bytes, kind: str) -> _Header:
    # PIL reads only the header here (no pixels): the dimensions a decoder would allocate.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the bomb warning (judged below) and notes on odd tags
            with Image.open(io.BytesIO(data)) as im:
                header = _Header(*im.size, im.mode, list(im.tile))
    except Image.DecompressionBombError:
        header = _declared_header(data)
    except UnidentifiedImageError:
        raise ImageError(f"corrupt {kind} header: no readable image size in it") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"corrupt {kind} header: {exc}") from None
    width, height = header.width, header.height
    if width <= 0 or height <= 0:
        raise ImageError(f"corrupt {kind} header: it declares a {width}x{height} image")
    if width * height > MAX_PIXELS:
        raise ImageError(f"image too large: the {kind} header declares {width}x{height} pixels "
                         f"({width * height / 1e6:.0f} megapixels; the limit is {MAX_PIXELS / 1e6:.0f})")
    return header


def _declared_header(data: bytes) -> _Header:
    # PIL refused before saying the size: open it again with its limit lifted for this call.
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return _Header(*im.size, im.mode, list(im.tile))
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def _check_jpeg_complete(data: bytes) -> None:
    # A complete JPEG ends its last scan (SOS, FF DA) with an EOI marker (FF D9). Inside
    # entropy-coded data every FF byte is stuffed, so an FF D9 after the last SOS is the
    # real end; an EXIF thumbnail's own EOI sits before the main image's SOS.
    last_scan = data.rfind(b"\xff\xda")
    if last_scan < 0:
        raise ImageError(f"corrupt JPEG: no image data (no start-of-scan marker) in {len(data)} bytes")
    if data.rfind(b"\xff\xd9") < last_scan:
        raise ImageError(f"truncated JPEG: the file ends after {len(data)} bytes without an end-of-image marker")


MIN_JPEG_BITS_PER_BLOCK = 0.5
"""A Huffman-coded JPEG whose entropy-coded data holds fewer bits than this per 8x8 block of
its full-resolution component is refused: its header declares far more pixels than its data
can hold, and a decoder would allocate them all (a 700-byte file declaring 13000x13000 asks
for about 0.5 GB). Why 0.5: every block's DC coefficient is one Huffman code of at least one
bit, in every JPEG of any quality, baseline or progressive, so 1 bit per block is a hard floor;
the smallest measured (PIL/libjpeg-turbo, a flat 4000x3000 image, quality 1, 50 and 95, black,
white, grey, RGB and grayscale, baseline, optimized, progressive, 4:4:4) was 2.0 bits per
block (grayscale optimized; RGB 4:2:0 optimized 3.0, default tables 6.0 to 14.0). Half the
floor, a quarter of the measured minimum: no real photo or flat image is refused. Arithmetic-coded
JPEGs (SOF9-SOF15, rare, no floor of the kind) are not judged by it."""

MAX_PNG_RATIO = 2064
"""A PNG whose decompressed pixel rows (height x (1 + row bytes)) exceed its IDAT bytes this
many times over is refused, for the same reason. Deflate cannot compress more than 1032:1
(a 258-byte match in two 1-bit codes); a flat 4000x3000 PNG at level 9 measured 1030:1 (black
RGB), 854:1 (grey, white), 759:1 (grayscale). Twice deflate's limit: only a file whose data
cannot hold its declared size is refused."""


def _check_data_evidence(data: bytes, kind: str, header: _Header) -> None:
    """:class:`ImageError` when the file's compressed data is far too short for the size its
    header declares (:data:`MIN_JPEG_BITS_PER_BLOCK`, :data:`MAX_PNG_RATIO`): decoders trust
    the header and allocate the full image before they find the data missing."""
    width, height = header.width, header.height
    if kind == "JPEG":
        scan, arithmetic = _jpeg_scan_bytes(data)
        blocks = -(-width // 8) * -(-height // 8)
        if not arithmetic and scan * 8 < MIN_JPEG_BITS_PER_BLOCK * blocks:
            raise ImageError(f"JPEG data too short for its size: the header declares {width}x{height} pixels "
                             f"({blocks} blocks of 8x8), its scans hold {scan} bytes; any real JPEG of that "
                             f"size holds at least {-(-blocks // 8)} (one bit a block)")
    elif kind == "PNG":
        compressed, raw = _png_data_sizes(data, width, height)
        if raw > MAX_PNG_RATIO * compressed:
            raise ImageError(f"PNG data too short for its size: the header declares {width}x{height} pixels "
                             f"({raw} bytes of rows), its IDAT chunks hold {compressed} bytes; deflate cannot "
                             f"compress more than 1032:1")


_ARITHMETIC_SOF = frozenset((0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))


def _jpeg_scan_bytes(data: bytes) -> tuple[int, bool]:
    """(bytes of entropy-coded data in every scan, whether it is arithmetic-coded). Marker
    segments (APP, COM, tables) do not count: padding a file with metadata is no evidence of
    pixels. Where the structure cannot be followed (bytes between segments that decoders skip
    with a warning), everything after the first scan's start counts: never less than the scans."""
    arithmetic = False
    total, i, n = 0, 2, len(data)
    try:
        while i + 1 < n:
            if data[i] != 0xFF:
                raise ValueError(i)
            marker = data[i + 1]
            if marker == 0xFF:  # fill bytes before a marker
                i += 1
                continue
            if marker == 0xD9:
                break
            if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # no length
                i += 2
                continue
            length = int.from_bytes(data[i + 2:i + 4], "big")
            if length < 2:
                raise ValueError(i)
            arithmetic = arithmetic or marker in _ARITHMETIC_SOF
            i += 2 + length
            if marker == 0xDA:  # the entropy-coded data, up to the next marker that is not a restart
                start = i
                while True:
                    i = data.index(b"\xff", i)
                    following = data[i + 1]
                    if following == 0x00 or 0xD0 <= following <= 0xD7:
                        i += 2
                        continue
                    break
                total += i - start
    except (ValueError, IndexError):
        return len(data) - data.find(b"\xff\xda"), arithmetic
    return total, arithmetic


def _png_data_sizes(data: bytes, width: int, height: int) -> tuple[int, int]:
    """(bytes of IDAT data, bytes of the decompressed rows the header declares: height x
    (filter byte + row), interlacing ignored: it only adds). A chunk list that cannot be
    followed counts the whole file as data."""
    bit_depth, color_type = data[24], data[25]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color_type, 1)
    raw = height * (1 + -(-width * channels * bit_depth // 8))
    compressed, i = 0, 8
    try:
        while i + 8 <= len(data):
            length, kind = int.from_bytes(data[i:i + 4], "big"), data[i + 4:i + 8]
            if kind == b"IDAT":
                compressed += min(length, len(data) - i - 8)
            if kind == b"IEND":
                break
            i += 12 + length
    except IndexError:
        return len(data), raw
    return compressed, raw


def _describe_head(data: bytes) -> str:
    head = data[:8]
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in data[:64]) == min(len(data), 64)
    kind = "; looks like text" if printable else ""
    return f"(first bytes {head.hex(' ')}{kind}, {len(data)} bytes)"
