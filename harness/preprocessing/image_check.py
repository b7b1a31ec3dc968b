"""The image guard: cheap checks on encoded image bytes, in front of every decoder of every
path, so a bad file gets an error that names the problem and no file costs more than its
size can justify.

Decoders report bad data poorly (DALI says ``nvImageCodec failure: '#4'``, OpenCV returns
None, libjpeg decodes a truncated file into a half-grey image) and trust what a header
declares (a 38-byte WebP decodes to 14000 x 14000 pixels), so every pipeline (the served
models of both profiles, the harness's reference, the label files that are images) runs
:func:`inspect` on the bytes first and, if a decoder still fails, wraps its message in
:class:`ImageError`. docs/robustness.md lists what it refuses and why.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import simplejpeg
from PIL import Image, UnidentifiedImageError

from harness import MAX_IMAGE_PIXELS
from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.spec import ResizeSpec

FORMATS = ("JPEG", "PNG", "WebP", "BMP", "TIFF", "JPEG 2000", "PNM")
"""The formats every path takes: those both DALI's decoder and OpenCV's read."""

# File signatures of the formats both DALI's and OpenCV's decoders read (WebP: RIFF....WEBP).
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

# Image formats some decoder would read, refused by name (a format no path can bound or decode alike).
_REFUSED_SIGNATURES = (
    (b"GIF87a", "GIF", "DALI's decoder reads no GIF, nor does this OpenCV build"),
    (b"GIF89a", "GIF", "DALI's decoder reads no GIF, nor does this OpenCV build"),
    (b"II+\x00", "BigTIFF", "neither DALI's decoder nor OpenCV's reads BigTIFF alike"),
    (b"MM\x00+", "BigTIFF", "neither DALI's decoder nor OpenCV's reads BigTIFF alike"),
    (b"#?RADIANCE", "Radiance HDR", "DALI's decoder reads no HDR"),
    (b"#?RGBE", "Radiance HDR", "DALI's decoder reads no HDR"),
    (b"\x59\xa6\x6a\x95", "Sun raster", "DALI's decoder reads no Sun raster"),
    (b"PF\n", "PFM", "DALI's decoder reads no PFM"),
    (b"Pf\n", "PFM", "DALI's decoder reads no PFM"),
    (b"\x76\x2f\x31\x01", "OpenEXR", "DALI's decoder reads no OpenEXR"),
)


MAX_PIXELS = MAX_IMAGE_PIXELS
"""Images whose header declares more pixels are refused before any decoder allocates them
(a 65500x65500 header asks for 12 GiB). The same point where PIL refuses (about 179
megapixels), so the PIL-based training recipes and the deployment agree on what is too big;
OpenCV is held to it by its own guard (``OPENCV_IO_MAX_IMAGE_PIXELS``, set in :mod:`harness`)."""

MAX_PIXELS_WITHOUT_FLOOR = 2 ** 24
"""The most pixels (16.8 megapixels, 4096 x 4096, 48 MiB decoded) an image may declare when its
coding holds no data floor (a lossless WebP, JPEG 2000): nothing in such a file bounds what its
header declares (a 38-byte lossless WebP decodes to 14000 x 14000), so the header alone is
trusted only this far, and such an image is decoded in full by Pillow before any other decoder
sees it (OpenCV's JPEG 2000 decoder crashes the process on a malformed header Pillow refuses)."""


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
class ImageHeader:
    """What the image guard read of a file (no pixel decoded, unless ``decoded``)."""

    kind: str
    """The format (one of :data:`FORMATS`)."""
    width: int
    height: int
    mode: str
    coding: str
    """How its pixels are coded, as the guard judged them: "Huffman", "deflate", "raw", "lossless", ..."""
    tiles: tuple = ()
    decoded: bool = False
    """Decoded in full by Pillow already (a coding without a data floor)."""


def inspect(data: np.ndarray | bytes) -> ImageHeader:
    """The one image guard, in front of every decoder of every path: what ``data`` (one request
    row: the file, maybe zero padded) is, or :class:`ImageError` naming why no decoder should
    be given it.

    The format by its signature (one of :data:`FORMATS`; others refused by name); the size
    from its real header, read by Pillow, at most :data:`MAX_PIXELS`; and the evidence that the
    file holds that many pixels: a coding with a floor (Huffman JPEG, PNG's and TIFF's deflate,
    LZW and PackBits, lossy WebP, uncompressed BMP, TIFF and PNM) must hold at least that many
    bytes for its size (:data:`MIN_JPEG_BITS_PER_BLOCK`, :data:`MAX_EXPANSION`,
    :data:`MIN_VP8_BITS_PER_MACROBLOCK`); a coding without one (lossless WebP, JPEG 2000) may
    declare at most :data:`MAX_PIXELS_WITHOUT_FLOOR` and is decoded by Pillow here; a coding
    no path can bound or decode alike (arithmetic JPEG, run-length BMP, TIFF's other
    compressions, animated WebP) is refused by name. Then, whatever the coding: at most
    :data:`MAX_PIXELS_PER_BYTE` pixels a byte of file and :data:`MAX_DECODED_BYTES` decoded; a
    JPEG of at most :data:`MAX_JPEG_SCANS` scans; and no file DALI's decoder cannot read (a
    single-channel TIFF, a plain PNM ending in a value), so both pipelines refuse it alike. About
    0.1 ms for a photo.
    """
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    stripped = raw.rstrip(b"\x00")
    kind = _format(stripped)
    if kind == "JPEG":
        _check_jpeg_complete(stripped)
    # Pillow reads the header from the row as the decoders get it: padding included (a TIFF's
    # last IFD ends in zero bytes; a WebP's RIFF size counts its own).
    pil = _read_header(raw, kind)
    coding, floor = _coding(kind, pil, raw, stripped)
    header = ImageHeader(kind, pil.width, pil.height, pil.mode, coding, tuple(pil.tiles))
    if floor is not None:
        floor(header)
    elif header.width * header.height > MAX_PIXELS_WITHOUT_FLOOR:
        raise ImageError(f"image too large for its coding: a {coding} {kind} declaring {header.width}x{header.height} "
                         f"pixels ({header.width * header.height / 1e6:.0f} megapixels); its data can be any length for "
                         f"any size, so it may declare at most {MAX_PIXELS_WITHOUT_FLOOR / 1e6:.1f} megapixels")
    _check_pixels_per_byte(header, len(stripped))
    _check_decoded_volume(pil)
    if floor is not None:
        return header
    _decode_with_pil(raw, kind)
    return replace(header, decoded=True)


def identify(data: np.ndarray | bytes) -> str:
    """The image format of ``data`` once :func:`inspect` let it through, or :class:`ImageError`."""
    return inspect(data).kind


def _format(data: bytes) -> str:
    # The format of the (padding-stripped) file by its signature.
    if not data:
        raise ImageError("empty image: the request holds 0 bytes of image data")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    for signature, name in _SIGNATURES:
        if data.startswith(signature):
            return name
    for signature, name, why in _REFUSED_SIGNATURES:
        if data.startswith(signature):
            raise ImageError(f"a {name} file: not a format the deployment takes ({', '.join(FORMATS)}): {why}")
    raise ImageError(f"not an image: unrecognized file signature {_describe_head(data)}")


VALIDATIONS = ("header", "decode")


def validate(data: np.ndarray | bytes, level: str = "decode", resize: ResizeSpec | None = None) -> str:
    """The format of ``data`` (one request row: the file, maybe zero padded) if a decoder can
    be expected to decode it, else :class:`ImageError`.

    ``header`` is :func:`inspect`, the image guard: signature, JPEG structure, declared
    dimensions, the evidence of the data (about 0.1 ms). It cannot see damage a decoder meets
    only while decoding, such as a corrupt Huffman or quantization table. ``decode`` also decodes
    JPEGs with libjpeg-turbo at 1/8 size (about 1.1 ms for a 640x480 photo, three quarters of a
    full decode: the entropy decoding dominates). Decoder *warnings* (damaged scan data, which
    libjpeg and DALI decode into a damaged image) are not errors here, as they are not for the
    pipelines. Other formats are rare enough to be decoded in full by PIL. With ``resize`` (the
    spec's), an image the resize would blow up beyond :data:`MAX_PIXELS` is refused too (a
    1x65500 JPEG is 65500 pixels; shorter side to 256, it would be 256x16768000).
    """
    if level not in VALIDATIONS:
        raise ValueError(f"validation level must be one of {VALIDATIONS}, got {level!r}")
    # Decoders get the row as the pipeline will: padding included. Stripped, a BMP whose
    # last pixels are black would look truncated; decoders stop at the image's own end.
    data = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    header = inspect(data)
    if resize is not None:
        check_resize(header.height, header.width, resize)
    if level == "decode" and not header.decoded:
        if header.kind == "JPEG":
            try:  # the guard's header, not simplejpeg's: its header raised KeyError on a subsampling it cannot name (1x4 luma)
                simplejpeg.decode_jpeg(data, min_height=max(1, header.height // 8), min_width=max(1, header.width // 8),
                                       strict=False)
            except ValueError as exc:  # what simplejpeg raises for broken data
                raise ImageError(f"corrupt JPEG: {exc}") from None
        else:
            _decode_with_pil(data, header.kind)
    return header.kind


def _decode_with_pil(data: bytes, kind: str) -> None:
    try:
        with warnings.catch_warnings(), Image.open(io.BytesIO(data)) as im:
            warnings.simplefilter("ignore")
            im.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:  # what PIL raises for broken data
        raise ImageError(f"corrupt {kind}: {exc}") from None


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


_BITS_PER_PIXEL = {"1": 1, "L": 8, "P": 8, "RGB": 24, "RGBA": 32, "CMYK": 32, "I;16": 16, "I;16B": 16, "LA": 16}


@dataclass(frozen=True)
class _Header:
    """What PIL read of an image's header (no pixels decoded)."""

    width: int
    height: int
    mode: str
    tiles: list
    compression: str | int | None = None
    """PIL's ``info["compression"]`` (a TIFF's and a BMP's)."""
    stored: int | None = None
    """A TIFF's strip or tile byte counts, summed (what its compressed data holds)."""
    rawmode: str = ""
    """How the file stores a pixel, in PIL's words (``RGBA;16B``: 16-bit samples, where ``mode`` says RGBA)."""

    @property
    def sample_bytes(self) -> int:
        """Bytes a decoder holds per sample: 2 for 16-bit samples, 4 for 32-bit ones, else 1 (1-bit samples too)."""
        if ";16" in self.rawmode or self.mode.startswith("I;16"):
            return 2
        return 4 if self.mode in ("I", "F") else 1

    @property
    def decoded_bytes(self) -> int:
        return -(-self.width * self.height * _BITS_PER_PIXEL.get(self.mode, 8 * len(self.mode)) // 8)


def _read_header(data: bytes, kind: str) -> _Header:
    # PIL reads only the header here (no pixels): the dimensions a decoder would allocate.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the bomb warning (judged below) and notes on odd tags
            with Image.open(io.BytesIO(data)) as im:
                header = _pil_header(im, len(data))
    except Image.DecompressionBombError:
        header = _declared_header(data)
    except UnidentifiedImageError:
        raise ImageError(f"corrupt {kind} header: no readable image size in it") from None
    except (OSError, ValueError, SyntaxError, KeyError, TypeError) as exc:
        raise ImageError(f"corrupt {kind} header: {exc}") from None
    width, height = header.width, header.height
    if width <= 0 or height <= 0:
        raise ImageError(f"corrupt {kind} header: it declares a {width}x{height} image")
    if width * height > MAX_PIXELS:
        raise ImageError(f"image too large: the {kind} header declares {width}x{height} pixels "
                         f"({width * height / 1e6:.0f} megapixels; the limit is {MAX_PIXELS / 1e6:.0f})")
    return header


def _pil_header(im, size: int) -> _Header:
    stored = None
    if getattr(im, "tag_v2", None) is not None:  # a TIFF: its strips' (or tiles') byte counts, within the file
        counts = im.tag_v2.get(279) or im.tag_v2.get(325) or ()
        stored = min(sum(int(c) for c in counts), size)
    args = im.tile[0].args if im.tile else None
    rawmode = args if isinstance(args, str) else args[0] if isinstance(args, tuple) and args and isinstance(args[0], str) else ""
    return _Header(*im.size, im.mode, list(im.tile), im.info.get("compression"), stored, rawmode)


def _declared_header(data: bytes) -> _Header:
    # PIL refused before saying the size: open it again with its limit lifted for this call.
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return _pil_header(im, len(data))
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


# -- the evidence: what a file must hold for the size it declares ---------------------------------

MIN_JPEG_BITS_PER_BLOCK = 0.5
"""A Huffman-coded JPEG whose entropy-coded data holds fewer bits than this per 8x8 block of
its full-resolution component is refused: its header declares far more pixels than its data
can hold, and a decoder would allocate them all (a 700-byte file declaring 13000x13000 asks
for about 0.5 GB). Why 0.5: every block's DC coefficient is one Huffman code of at least one
bit, in every JPEG of any quality, baseline or progressive, so 1 bit per block is a hard floor;
the smallest measured (PIL/libjpeg-turbo, a flat 4000x3000 image, quality 1, 50 and 95, black,
white, grey, RGB and grayscale, baseline, optimized, progressive, 4:4:4) was 2.0 bits per
block (grayscale optimized; RGB 4:2:0 optimized 3.0, default tables 6.0 to 14.0). Half the
floor, a quarter of the measured minimum: no real photo or flat image is refused.
Arithmetic-coded JPEGs (SOF9-SOF15) have no such floor (an adaptive binary coder spends far
less than a bit on a certain decision) and nvJPEG does not decode them: they are refused."""

MAX_EXPANSION = {"deflate": 2064, "LZW": 5120, "PackBits": 128}
"""Compressed data (PNG's and TIFF's) expanding into more than this many times its bytes of
pixel rows is refused, for the same reason: each is twice what the coding can do at best.
Deflate cannot compress more than 1032:1 (a 258-byte match in two 1-bit codes); a flat
4000x3000 PNG at level 9 measured 1030:1 (black RGB), 854:1 (grey, white), 759:1 (grayscale), a
TIFF 741:1. A 12-bit LZW code stands for at most 3839 bytes (4096 codes less the 256 literals
and the clear and end codes): 2559:1; a flat 4000x3000 TIFF measured 149:1. PackBits repeats a
byte at most 128 times for 2 bytes: 64:1; measured 63.8:1."""

MIN_VP8_BITS_PER_MACROBLOCK = 1.0
"""A lossy WebP (VP8) whose data holds fewer bits than this per 16x16 macroblock is refused:
a key frame codes each macroblock's luma and chroma prediction modes with fixed probabilities
(at best DC_PRED, about 1.9 + 0.9 bits), so about 2.7 bits is a hard floor; a flat 4000x3000
image at quality 0, 50 and 100, black, white, grey and coloured, measured 3.4 to 3.8 bits.
About a third of the floor."""

MAX_PIXELS_PER_BYTE = 1024
"""No image may declare more pixels than this per byte of its file, whatever its coding: a JPEG's
own floor (half a bit an 8x8 block). The floors above count the bytes of what a coding codes, so
a coding that packs pixels into bits got more pixels a byte than a JPEG: a 1-bit PNG, TIFF or PBM
(8 pixels a byte of rows, and deflate's 1032:1 on top: a 20 KB PNG declared 13000 x 13000, +1 GB
a request in the server), and so did the codings with no floor (a 391-byte JPEG 2000 declaring
4096 x 4096, +835 MB). Photos hold 0.3 to 30 pixels a byte; flat 8-bit images at their coding's
best compression measured at most 759 (a grey PNG; RGB PNG 343, lossy WebP 602): they pass. A
flat 1-bit image (a blank page, about 8,000 pixels a byte) is refused."""

MAX_DECODED_BYTES = 3 * MAX_PIXELS
"""An image whose pixels take more bytes than this at its own samples' size and count (16-bit
samples two bytes, alpha a fourth; at least the three of the RGB every pipeline makes) is
refused: the largest 8-bit RGB image :data:`MAX_PIXELS` admits (537 MB). A 16-bit RGBA PNG is
8 bytes a pixel in a decoder (+1.26 GB a request at 179 megapixels): it may declare 67
megapixels. nvImageCodec bounds the same volume (``NVIMGCODEC_MAX_IMAGE_SIZE``)."""

MAX_JPEG_SCANS = 256
"""A JPEG of more scans (start-of-scan markers) than this is refused: each progressive scan is a
pass over every block of its component, and a scan that codes every block as one end-of-band
run is a few bytes, so 20,000 repeated AC scans (Ss=1, Se=63, a legal progression: no libjpeg
warning) in 455 KB took 2.3 s to decode a 1411 x 1411 photo, and 58-148 s of server CPU at a
larger size. nvImageCodec, DALI's decoder, refuses more than 256 itself
(``NVIMGCODEC_MAX_JPEG_SCANS``' default), with an opaque error; real encoders write at most
about a dozen (libjpeg's progressive script: 10)."""

_TIFF_CODINGS = {"raw": "raw", "tiff_adobe_deflate": "deflate", "tiff_deflate": "deflate", "tiff_lzw": "LZW",
                 "packbits": "PackBits"}
"""PIL's name of a TIFF's compression -> the coding the guard bounds (the TIFF compressions
DALI's decoder and OpenCV's both read, each with a floor)."""


def _coding(kind: str, header: _Header, raw: bytes, stripped: bytes):
    """(the coding's name, the check of its evidence, or None where the coding has no floor)."""
    if kind == "JPEG":
        scan, scans, arithmetic = _jpeg_scans(stripped)
        if scans > MAX_JPEG_SCANS:
            raise ImageError(f"JPEG of {scans} scans: refused (more than {MAX_JPEG_SCANS}; each scan is a pass over every "
                             "block, and DALI's decoder refuses more than 256 itself); re-encode it "
                             "(`jpegtran -optimize`, or baseline)")
        if arithmetic:
            raise ImageError("arithmetic-coded JPEG: refused (nvJPEG, the GPU decoder, reads Huffman-coded JPEGs only, "
                             "and nothing in such a file bounds the size it declares); re-encode it with Huffman "
                             "coding (`jpegtran -optimize`)")
        return "Huffman", lambda h: _check_jpeg_bits(h, scan)
    if kind == "PNG":
        return "deflate", lambda h: _check_expansion(h, "PNG", "deflate", *_png_data_sizes(stripped, h.width, h.height))
    if kind == "WebP":
        chunk, length = _webp_chunk(raw)
        if chunk == "VP8L":
            return "lossless", None
        if chunk == "VP8 ":
            return "lossy", lambda h: _check_vp8_bits(h, length)
        if chunk == "ANIM":
            raise ImageError("animated WebP: refused (the deployment decodes single images, lossy or lossless)")
        raise ImageError("corrupt WebP: no image data (VP8 or VP8L chunk) in it")
    if kind == "JPEG 2000":
        return "wavelet", None
    codecs = {tile.codec_name for tile in header.tiles}
    if kind == "BMP":
        if codecs == {"raw"}:
            return "raw", lambda h: _check_raw(h, len(raw), kind)
        if header.compression in (1, 2):
            raise ImageError(f"run-length encoded BMP (RLE{8 if header.compression == 1 else 4}): refused (its escape "
                             "codes let a few bytes declare any size, and DALI's decoder reads no RLE4); save it "
                             "uncompressed or as PNG")
        raise ImageError(f"BMP of compression {header.compression}: refused (the deployment takes uncompressed BMPs)")
    if kind == "TIFF":
        coding = _TIFF_CODINGS.get(str(header.compression))
        if coding is None:
            raise ImageError(f"TIFF compressed with {header.compression}: refused (the deployment takes TIFFs "
                             f"uncompressed or compressed with LZW, Deflate or PackBits, whose data bounds their size)")
        if Image.getmodebands(header.mode) == 1 and header.mode != "P":
            raise ImageError(f"a bilevel or grayscale TIFF (PIL mode {header.mode}): refused (DALI's decoder reads no "
                             "single-channel TIFF but a palette one, where OpenCV decodes it); "
                             "save it as PNG or as an RGB TIFF")
        if coding == "raw":
            return "raw", lambda h: _check_raw(h, len(raw), kind)
        return coding, lambda h: _check_expansion(h, kind, coding, header.stored or 0, header.decoded_bytes)
    if codecs == {"ppm_plain"}:  # PNM's plain (ASCII) variants: at least a character a pixel
        if not stripped[-1:].isspace():
            raise ImageError("a plain PNM whose last pixel value ends the file (no whitespace after it): refused (DALI's "
                             "decoder fails on such files, where OpenCV decodes them); end "
                             "it with a newline, or save it as raw PNM or PNG")
        return "plain", lambda h: _check_plain(h, len(stripped))
    return "raw", lambda h: _check_raw(h, len(raw), kind)


def _too_short(kind: str, header, holds: str, needs: str) -> ImageError:
    return ImageError(f"{kind} data too short for its size: the header declares {header.width}x{header.height} "
                      f"pixels, {holds}; {needs}")


def _check_jpeg_bits(header: ImageHeader, scan: int) -> None:
    blocks = -(-header.width // 8) * -(-header.height // 8)
    if scan * 8 < MIN_JPEG_BITS_PER_BLOCK * blocks:
        raise _too_short("JPEG", header, f"{blocks} blocks of 8x8; its scans hold {scan} bytes",
                         f"any real JPEG of that size holds at least {-(-blocks // 8)} (one bit a block)")


def _check_expansion(header: ImageHeader, kind: str, coding: str, compressed: int, decoded: int) -> None:
    limit = MAX_EXPANSION[coding]
    if decoded > limit * compressed:
        raise _too_short(kind, header, f"{decoded} bytes of rows; its {coding} data holds {compressed} bytes",
                         f"{coding} cannot expand more than {limit // 2}:1")


def _check_vp8_bits(header: ImageHeader, length: int) -> None:
    macroblocks = -(-header.width // 16) * -(-header.height // 16)
    if length * 8 < MIN_VP8_BITS_PER_MACROBLOCK * macroblocks:
        raise _too_short("WebP", header, f"{macroblocks} macroblocks of 16x16; its VP8 data holds {length} bytes",
                         "a lossy WebP codes every macroblock in about 3 bits at least")


def _check_pixels_per_byte(header: ImageHeader, size: int) -> None:
    pixels = header.width * header.height
    if pixels > MAX_PIXELS_PER_BYTE * size:
        raise ImageError(f"image too large for its file: a {size}-byte {header.coding} {header.kind} declaring "
                         f"{header.width}x{header.height} pixels, {pixels // size} a byte; no image may declare more "
                         f"than {MAX_PIXELS_PER_BYTE} pixels a byte of its file (a JPEG's floor), whatever its coding")


def _check_decoded_volume(header: _Header) -> None:
    volume = header.width * header.height * max(3, Image.getmodebands(header.mode)) * header.sample_bytes
    if volume > MAX_DECODED_BYTES:
        raise ImageError(f"image too large decoded: its {header.width}x{header.height} {header.mode} pixels of "
                         f"{8 * header.sample_bytes}-bit samples take {volume / 1e6:.0f} MB; the limit is "
                         f"{MAX_DECODED_BYTES / 1e6:.0f} MB (the largest 8-bit RGB image the pixel limit admits)")


def _check_plain(header: ImageHeader, size: int) -> None:
    if size < header.width * header.height:
        raise _too_short("PNM", header, f"its plain (text) data holds {size} bytes", "at least a character a pixel")


def _check_raw(header: ImageHeader, size: int, kind: str) -> None:
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


def _webp_chunk(data: bytes) -> tuple[str, int]:
    """(the first image chunk's name: "VP8 ", "VP8L", or "ANIM" for an animation; its data's
    length within the file). An extended WebP (VP8X) is followed chunk by chunk."""
    i = 12
    while i + 8 <= len(data):
        name, length = data[i:i + 4].decode("latin-1"), int.from_bytes(data[i + 4:i + 8], "little")
        if name in ("VP8 ", "VP8L", "ANIM"):
            return name, min(length, len(data) - i - 8)
        i += 8 + length + (length & 1)
    return "", 0


_ARITHMETIC_SOF = frozenset((0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))


def _jpeg_scans(data: bytes) -> tuple[int, int, bool]:
    """(bytes of entropy-coded data in every scan, how many scans, whether it is arithmetic-coded).
    Marker segments (APP, COM, tables) do not count: padding a file with metadata is no evidence
    of pixels. Where the structure cannot be followed (bytes between segments that decoders skip
    with a warning), everything after the first scan's start counts, and every start-of-scan
    marker (entropy-coded data stuffs its FF bytes, so none is one): never less than the scans."""
    arithmetic = False
    total, scans, i, n = 0, 0, 2, len(data)
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
                scans += 1
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
        return len(data) - data.find(b"\xff\xda"), max(scans, data.count(b"\xff\xda")), arithmetic
    return total, scans, arithmetic


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
