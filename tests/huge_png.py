"""Huge PNGs that are small files: one colour, ``side`` x ``side`` RGB, written row by row so
that neither the writer nor the file ever holds the decoded image (13000 x 13000 is 507 MB
decoded, 0.5 MB on disk: the issue's decompression case, under the pixel limit)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def huge_png(path: Path, side: int, color: tuple[int, int, int] = (200, 30, 60)) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(color) * side  # filter type 0, then the pixels
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8 bits, RGB
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return Path(path)


RSS_WRAPPER = """
import resource, sys
from harness.cli import main
status = main(sys.argv[1:])
print(f"peak RSS kB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
sys.exit(status)
"""
"""``python -c RSS_WRAPPER check ...``: the command, then its own peak RSS on stderr's last line."""
