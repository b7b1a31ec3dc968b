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


# -- the third round (issue 58): costs a byte of file, by real encoders -----------------------------

SCANS = 20_000
"""The issue's repeated AC scans."""


def jpeg_repeated_scans(photo: bytes, scans: int = SCANS) -> bytes:
    """A real photo as Pillow's (libjpeg's) progressive JPEG, followed by ``scans`` repeats of a first
    AC scan of its luma (Ss=1, Se=63, Ah=Al=0) coding every block as one end-of-band run: a full pass
    over the blocks in a dozen bytes, and a legal progression (every coefficient is already at full
    precision, so libjpeg warns of nothing). Its own AC Huffman table (slot 1) holds the one symbol."""
    from PIL import Image

    buf = io.BytesIO()
    Image.open(io.BytesIO(photo)).convert("RGB").save(buf, "JPEG", quality=90, progressive=True)
    data = buf.getvalue()
    sof = data.index(b"\xff\xc2")
    height, width = struct.unpack(">HH", data[sof + 5:sof + 9])
    luma, blocks = data[sof + 10], -(-width // 8) * -(-height // 8)
    assert blocks < 1 << 15, "one end-of-band run covers at most 32,767 blocks"
    run = blocks.bit_length() - 1  # the run: 2**run + `run` extra bits, after its 1-bit code ("0")
    table = b"\xff\xc4" + struct.pack(">H", 20) + bytes([0x11, 1] + [0] * 15 + [run << 4])
    bits = "0" + (format(blocks - (1 << run), f"0{run}b") if run else "")
    bits += "1" * (-len(bits) % 8)
    coded = int(bits, 2).to_bytes(len(bits) // 8, "big").replace(b"\xff", b"\xff\x00")
    scan = b"\xff\xda" + struct.pack(">HB", 8, 1) + bytes([luma, 0x01, 1, 63, 0]) + coded
    return data[:-2] + table + scan * scans + b"\xff\xd9"


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def flat_png(side: int, bit_depth: int = 8, colour_type: int = 2, interlaced: bool = False) -> bytes:
    """A black PNG of ``side`` x ``side``, any bit depth and colour type, Adam7-interlaced or not.
    zlib deflates about 1 MB of rows, flushed in full (its history reset), so each such block's
    deflate bytes are the same and are repeated: a real zlib stream in a fraction of a second
    whatever the side, and neither the writer nor the file ever holds the decoded image."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour_type]
    z, adler, deflated = zlib.compressobj(9, zlib.DEFLATED, -15), 1, []
    for x0, y0, dx, dy in _ADAM7 if interlaced else ((0, 0, 1, 1),):
        width, height = -(-(side - x0) // dx), -(-(side - y0) // dy)
        if width > 0 and height > 0:
            row = bytes(1 + -(-width * channels * bit_depth // 8))
            rows = min(height, max(1, 2 ** 20 // len(row)))  # deflated together: deflate's best ratio
            for count, repeats in ((rows, height // rows), (height % rows, 1)):
                deflated.append((z.compress(row * count) + z.flush(zlib.Z_FULL_FLUSH)) * repeats)
                for _ in range(repeats):
                    adler = zlib.adler32(row * count, adler)
    stream = b"\x78\xda" + b"".join(deflated) + z.flush() + adler.to_bytes(4, "big")
    header = struct.pack(">IIBBBBB", side, side, bit_depth, colour_type, 0, 0, int(interlaced))
    palette = _chunk(b"PLTE", bytes(3 << bit_depth)) if colour_type == 3 else b""
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + palette + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


def png_bilevel(side: int) -> bytes:
    """20 KB at 13000 x 13000: 8,000 pixels a byte."""
    return flat_png(side, 1, 0)


def png_bilevel_interlaced(side: int) -> bytes:
    return flat_png(side, 1, 0, interlaced=True)


def png_rgba16(side: int) -> bytes:
    """8 bytes a pixel decoded: 538 MB at 8200 x 8200 (0.5 MB of file)."""
    return flat_png(side, 16, 6)


def tiff_bilevel_lzw(side: int) -> bytes:
    """Pillow's 1-bit TIFF, LZW (libtiff): 140 KB at 13000 x 13000; DALI's decoder reads no such TIFF."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, "TIFF", compression="tiff_lzw")
    return buf.getvalue()


def pbm_packed(side: int) -> bytes:
    """A plain PBM (P1) whose pixels have no whitespace between them (the format allows it) nor after
    the last: OpenCV decodes it, DALI's decoder fails ('nvImageCodec failure #17'; so it does on a plain
    PGM or PPM ending in a value, but not on one ending in whitespace)."""
    return b"P1\n%d %d\n" % (side, side) + b"01" * (side * side // 2) + b"0" * (side * side % 2)


def jpeg2000_flat(side: int) -> bytes:
    """Pillow's (OpenJPEG's) lossless JPEG 2000 of a black image: 391 bytes at 4096 x 4096."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (side, side)).save(buf, "JPEG2000")
    return buf.getvalue()


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


def third_round(photo: bytes) -> dict[str, bytes]:
    """Issue 58's files, each answered before (the 16-bit PNG at the size where its decode passes
    537 MB; the TIFF and the JPEG 2000 smaller than the issue's, the same refusal): name -> bytes."""
    return {
        "JPEG, 20,000 repeated AC scans": jpeg_repeated_scans(photo),
        "PNG, 1-bit": png_bilevel(13000),
        "PNG, 1-bit, interlaced": png_bilevel_interlaced(13000),
        "PNG, 16-bit RGBA": png_rgba16(8200),
        "TIFF, 1-bit LZW": tiff_bilevel_lzw(1000),
        "PBM, P1 without separators": pbm_packed(64),
        "JPEG 2000, flat": jpeg2000_flat(1024),
    }


def _huffman_code(data: bytes, table: int, symbol: int) -> str:
    """The bits of ``symbol`` in a JPEG's Huffman ``table`` (class << 4 | id), from its DHT segments."""
    at = 0
    while (at := data.find(b"\xff\xc4", at + 1)) > 0:
        end, i = at + 2 + int.from_bytes(data[at + 2:at + 4], "big"), at + 4
        while i < end:
            counts, i = data[i + 1:i + 17], i + 17
            code, symbols = 0, iter(data[i:i + sum(counts)])
            for length, count in enumerate(counts, 1):
                for _ in range(count):
                    if data[i - 17] == table and next(symbols) == symbol:
                        return format(code, f"0{length}b")
                    if data[i - 17] != table:
                        next(symbols)
                    code += 1
                code <<= 1
            i += sum(counts)
    raise ValueError(f"no symbol {symbol} in table {table:#x}")


def jpeg_grey_sampled(width: int, height: int, luma: int = 0x31) -> bytes:
    """A flat mid-grey JPEG whose luma is sampled ``luma`` (h x v as SOF writes it: 0x31 is 3x1,
    legal JPEG that TurboJPEG cannot name a subsampling for), chroma 1x1: Pillow's (libjpeg's)
    baseline file, its SOF's sampling set and its scan written anew with the file's own Huffman
    codes, each block a DC difference of 0 and an end of block (mid-grey is 0 after the level shift)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(buf, "JPEG", subsampling=0, quality=90)
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 11] = luma
    h, v = luma >> 4, luma & 15
    block = {t: _huffman_code(data, t, 0) + _huffman_code(data, 0x10 | t, 0) for t in (0, 1)}  # luma: tables 0; chroma: 1
    bits = (block[0] * (h * v) + block[1] * 2) * (-(-width // (8 * h)) * -(-height // (8 * v)))
    bits += "1" * (-len(bits) % 8)
    coded = int(bits, 2).to_bytes(len(bits) // 8, "big").replace(b"\xff", b"\xff\x00")
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    return bytes(data[:start]) + coded + b"\xff\xd9"
