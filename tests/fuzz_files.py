"""Hostile image files for the fuzz campaign, generated from the corpus photos: seeded,
so the same seed gives the same files byte for byte.

Kinds: truncations at many offsets; byte flips in JPEG headers and in scan data; edited
SOF dimensions (0, 1, 65500: a decompression bomb); wrong extensions; PNG, WebP, BMP and
TIFF encodings, truncated and byte-flipped; a zero-length file and a huge one."""

from __future__ import annotations

import io
import random
import struct
from pathlib import Path

SOURCES = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg")
"""Corpus photos the files are made from (JPEGs of opencv-doc)."""
FORMATS = {"PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}
HUGE_BYTES = 24 * 2 ** 20
"""The huge file: a real JPEG followed by this much junk (about 24 MiB)."""


def _sof(data: bytes) -> int | None:
    """Offset of the first SOF0/1/2 marker of a JPEG (its height follows at +5, width at +7)."""
    for marker in (b"\xff\xc0", b"\xff\xc1", b"\xff\xc2"):
        at = data.find(marker, 2)
        if at > 0:
            return at
    return None


def _sos(data: bytes) -> int:
    """Offset of the first byte of scan data (after the SOS segment)."""
    at = data.find(b"\xff\xda")
    return at + 2 + struct.unpack(">H", data[at + 2:at + 4])[0]


def _flip(data: bytes, rng: random.Random, start: int, end: int, flips: int) -> bytes:
    out = bytearray(data)
    for _ in range(flips):
        i = rng.randrange(start, max(start + 1, min(end, len(out))))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _encode(data: bytes, fmt: str, side: int = 160) -> bytes:
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    image.thumbnail((side, side))
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


def hostile_files(photos_dir: Path, out_dir: Path, seed: int = 0, scale: int = 1) -> list[Path]:
    """Write the hostile files into ``out_dir`` (created); returns their paths. About
    ``210 * scale`` files (plus the fixed ones): ``scale`` sets the campaign's size."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    photos = {name: (photos_dir / name).read_bytes() for name in SOURCES}
    for name, data in photos.items():
        stem = Path(name).stem
        for i in range(12 * scale):  # truncations anywhere, the header included
            cut = rng.randrange(1, len(data))
            files[f"trunc_{stem}_{i}_{cut}.jpg"] = data[:cut]
        for i in range(10 * scale):  # byte flips in the header segments (tables, SOF, SOS)
            files[f"hdrflip_{stem}_{i}.jpg"] = _flip(data, rng, 2, _sos(data), rng.randint(1, 4))
        for i in range(8 * scale):  # byte flips in the entropy-coded scan data
            files[f"scanflip_{stem}_{i}.jpg"] = _flip(data, rng, _sos(data), len(data) - 2, rng.randint(1, 16))
        sof = _sof(data)
        # Not 1x65500: it passes every pixel limit, and the deployed DALI resize of it to a
        # shorter side of 256 allocates 12 GiB (see the report to the lead): not on a shared machine.
        for h, w in ((0, 0), (0, 640), (480, 0), (1, 1), (1, 640), (65500, 65500), (65500, 640)):
            edited = bytearray(data)
            edited[sof + 5:sof + 9] = struct.pack(">HH", h, w)
            files[f"sof_{stem}_{h}x{w}.jpg"] = bytes(edited)
        for fmt, ext in FORMATS.items():
            encoded = _encode(data, fmt)
            files[f"ok_{stem}{ext}"] = encoded
            files[f"{fmt.lower()}_as_jpg_{stem}.jpg"] = encoded  # wrong extension, valid file
            for i in range(3 * scale):
                files[f"{fmt.lower()}_trunc_{stem}_{i}{ext}"] = encoded[:rng.randrange(1, len(encoded))]
                files[f"{fmt.lower()}_flip_{stem}_{i}{ext}"] = _flip(encoded, rng, 0, 64, rng.randint(1, 6))
        files[f"jpg_as_png_{stem}.png"] = data
    files["empty.jpg"] = b""
    files["text.jpg"] = b"this is not an image\n" * 10
    files["zeros.jpg"] = bytes(4096)
    files["random.jpg"] = rng.randbytes(50_000)
    files["jpeg_magic_only.jpg"] = b"\xff\xd8\xff"
    photo = photos[SOURCES[0]]
    files["huge.jpg"] = photo + rng.randbytes(HUGE_BYTES)
    paths = []
    for name, data in files.items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths
