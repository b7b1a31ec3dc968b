"""Decode bombs, one per format and coding the deployment's decoders read: a file of a few
hundred bytes whose header declares ``side`` x ``side`` pixels (issue 45). Made from a tiny
real file of each kind with its header's size edited, so the rest of the file is what the
encoder wrote; deterministic (the same side gives the same bytes). Used by the tests (tiny
sides or the real ones: the guard refuses them before any decoder allocates) and by
``benchmarks/decode_bomb_rss.py``."""

from __future__ import annotations

import io
import struct
import zlib

# Arithmetic-coded JPEGs of a flat 8x8 image (libjpeg-turbo's `jpegtran -arithmetic [-progressive]`
# of a Pillow JPEG): Pillow, OpenCV and simplejpeg decode them, but none can write one.
_ARITHMETIC = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a"
    "333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb0043011112121815182f1a1a2f"
    "634238426363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363"
    "636363ffc90011080008000803012200021101031101ffcc000a0010100501101105ffda000c03010002110311003f00f109b14e"
    "48ffd9")
_ARITHMETIC_PROGRESSIVE = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a"
    "333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb0043011112121815182f1a1a2f"
    "634238426363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363"
    "636363ffca0011080008000803012200021101031101ffcc000600100110ffda000c03010002100310000001dcc999f0ffcc0004"
    "1005ffda0008010100010502c0ffcc00041105ffda0008010301013f01c0ffcc00041105ffda0008010201013f01c0ffcc0004"
    "1005ffda0008010100063f02c0ffcc00041005ffda0008010100013f21c0ffda000c0301000200030000001058ffcc00041105ff"
    "da0008010301013f10c0ffcc00041105ffda0008010201013f10c0ffcc00041005ffda0008010100013f10c0ffd9")

SIDE = 13376
"""The issue's side: 179 megapixels, just under the decode limit (2 x Pillow's MAX_IMAGE_PIXELS)."""


def _encode(fmt: str, size: int = 8, mode: str = "RGB", **options) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, (size, size), (10, 200, 30) if mode == "RGB" else 1).save(buf, fmt, **options)
    return buf.getvalue()


def _jpeg_sof(jpeg: bytes, height: int, width: int) -> bytes:
    i = 2
    while True:
        marker, length = jpeg[i + 1], int.from_bytes(jpeg[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return jpeg[:i + 5] + struct.pack(">HH", height, width) + jpeg[i + 9:]
        i += 2 + length


def jpeg_huffman(side: int) -> bytes:
    return _jpeg_sof(_encode("JPEG", 64, quality=50), side, side)


def jpeg_arithmetic(side: int) -> bytes:
    return _jpeg_sof(_ARITHMETIC, side, side)


def jpeg_arithmetic_progressive(side: int) -> bytes:
    return _jpeg_sof(_ARITHMETIC_PROGRESSIVE, side, side)


def png(side: int) -> bytes:
    data = _encode("PNG", 64)
    ihdr = data[12:16] + struct.pack(">II", side, side) + data[24:29]
    return data[:12] + ihdr + zlib.crc32(ihdr).to_bytes(4, "big") + data[33:]


def webp_lossless(side: int) -> bytes:
    """38 bytes: a flat image's one-symbol prefix codes decode any size from no data at all."""
    data = _encode("WEBP", lossless=True)
    at = data.index(b"VP8L") + 9
    bits = int.from_bytes(data[at:at + 4], "little") & ~((1 << 28) - 1) | (side - 1) | (side - 1) << 14
    return data[:at] + bits.to_bytes(4, "little") + data[at + 4:]


def webp_lossy(side: int) -> bytes:
    data = _encode("WEBP", 16, quality=50)
    at = data.index(b"VP8 ") + 8 + 6  # frame tag (3), start code (3), then width and height (14 bits each)
    return data[:at] + struct.pack("<HH", side, side) + data[at + 4:]


def _bmp(side: int, bits: int, compression: int, pixels: bytes) -> bytes:
    colours = 1 << bits
    palette = b"".join(bytes((i, i, i, 0)) for i in range(colours))
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, side, side, 1, bits, compression, len(pixels), 2835, 2835, colours, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + palette + pixels


def bmp_rle8(side: int) -> bytes:
    """A run of 4 pixels, then end of bitmap: OpenCV and DALI decode the rest as black."""
    return _bmp(side, 8, 1, bytes((4, 5, 0, 1)))


def bmp_rle4(side: int) -> bytes:
    return _bmp(side, 4, 2, bytes((4, 0x55, 0, 1)))


def bmp_raw(side: int) -> bytes:
    """An uncompressed BMP holding 16 bytes of its pixels."""
    return _bmp(side, 8, 0, bytes(16))


def _tiff(compression: str, side: int, mode: str = "RGB") -> bytes:
    """A Pillow TIFF of a flat 8x8 image (one strip) whose width, length and rows per strip say ``side``."""
    data = bytearray(_encode("TIFF", mode=mode, compression=compression))
    assert data[:4] == b"II*\x00"
    ifd = int.from_bytes(data[4:8], "little")
    for k in range(int.from_bytes(data[ifd:ifd + 2], "little")):
        at = ifd + 2 + 12 * k
        if struct.unpack("<H", data[at:at + 2])[0] in (256, 257, 278):  # ImageWidth, ImageLength, RowsPerStrip
            data[at + 2:at + 12] = struct.pack("<HII", 4, 1, side)  # as a LONG
    return bytes(data) + b"\xff"  # not ending in a zero byte (what a zero-padded row would lose)


def tiff_deflate(side: int) -> bytes:
    return _tiff("tiff_adobe_deflate", side)


def tiff_lzw(side: int) -> bytes:
    return _tiff("tiff_lzw", side)


def tiff_packbits(side: int) -> bytes:
    return _tiff("packbits", side)


def tiff_raw(side: int) -> bytes:
    return _tiff("raw", side)


def tiff_ccitt(side: int) -> bytes:
    """A bilevel TIFF in CCITT Group 4: an all-white row costs about a bit."""
    return _tiff("group4", side, mode="1")


def gif(side: int) -> bytes:
    data = bytearray(_encode("GIF", mode="P"))
    data[6:10] = struct.pack("<HH", side, side)  # the logical screen
    at = data.index(b"\x2c")  # the image descriptor: left, top, width, height
    data[at + 5:at + 9] = struct.pack("<HH", side, side)
    return bytes(data)


def _siz(data: bytes, side: int) -> bytes:
    at = data.index(b"\xff\x51") + 6  # SIZ: marker, Lsiz, Rsiz, then Xsiz, Ysiz
    return data[:at] + struct.pack(">II", side, side) + data[at + 8:]


def jpeg2000_codestream(side: int) -> bytes:
    return _siz(_encode("JPEG2000", no_jp2=True), side)


def jpeg2000(side: int) -> bytes:
    """A JP2 file: its header box and its codestream both say ``side``."""
    data = _siz(_encode("JPEG2000"), side)
    at = data.index(b"ihdr") + 4
    return data[:at] + struct.pack(">II", side, side) + data[at + 8:]


def pnm(side: int) -> bytes:
    return b"P6\n%d %d\n255\n" % (side, side) + bytes(48)


def pnm_plain(side: int) -> bytes:
    return b"P3\n%d %d\n255\n" % (side, side) + b"1 2 3\n" * 4


BOMBS = {
    "JPEG (Huffman)": jpeg_huffman,
    "JPEG (arithmetic)": jpeg_arithmetic,
    "JPEG (arithmetic, progressive)": jpeg_arithmetic_progressive,
    "PNG": png,
    "WebP (lossless)": webp_lossless,
    "WebP (lossy)": webp_lossy,
    "BMP (RLE8)": bmp_rle8,
    "BMP (RLE4)": bmp_rle4,
    "BMP (uncompressed)": bmp_raw,
    "TIFF (deflate)": tiff_deflate,
    "TIFF (LZW)": tiff_lzw,
    "TIFF (PackBits)": tiff_packbits,
    "TIFF (uncompressed)": tiff_raw,
    "TIFF (CCITT G4)": tiff_ccitt,
    "GIF": gif,
    "JPEG 2000 (codestream)": jpeg2000_codestream,
    "JPEG 2000 (JP2)": jpeg2000,
    "PNM": pnm,
    "PNM (plain)": pnm_plain,
}
"""Name -> the bomb of that format and coding, as a function of the declared side."""


def text_page(side: int, columns: int, rows: int, font_px: int, seed: int = 0) -> bytes:
    """A JPEG page of ``columns x rows`` short words (``w123``) in a grid on white: what makes an
    OCR model read as many words as its detector finds (1,000 on a 2048 x 2048 page)."""
    import random

    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(seed)
    page = Image.new("RGB", (side, side), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", font_px)
    cell_w, cell_h = side / columns, side / rows
    for r in range(rows):
        for c in range(columns):
            draw.text((c * cell_w + cell_w * 0.1, r * cell_h + cell_h * 0.2), f"w{rng.randint(10, 999)}", fill=(0, 0, 0),
                      font=font)
    buf = io.BytesIO()
    page.save(buf, "JPEG", quality=90)
    return buf.getvalue()
