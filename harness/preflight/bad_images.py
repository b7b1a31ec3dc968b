"""Undecodable variants of a real JPEG, one per way a file fails a decoder: what a server
must answer with an error for that request alone, while it goes on serving the others."""

from __future__ import annotations


def _segment(jpeg: bytes, markers: tuple[int, ...]) -> int:
    """Offset of the first marker segment of one of ``markers`` (before the image data)."""
    i = 2
    while i + 4 <= len(jpeg) and jpeg[i] == 0xFF:
        marker, length = jpeg[i + 1], int.from_bytes(jpeg[i + 2:i + 4], "big")
        if marker in markers:
            return i
        if marker == 0xDA:  # start of scan: no more header segments
            break
        i += 2 + length
    raise ValueError(f"no marker {', '.join(f'FF{m:02X}' for m in markers)} in the JPEG header")


def with_size(jpeg: bytes, height: int, width: int) -> bytes:
    """The JPEG with its frame header (SOF) declaring another size."""
    sof = _segment(jpeg, (0xC0, 0xC1, 0xC2))
    return jpeg[:sof + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[sof + 9:]


def png_with_size(png: bytes, height: int, width: int) -> bytes:
    """The PNG with its IHDR declaring another size (its CRC made right, so only the size lies)."""
    import zlib

    ihdr = png[12:16] + width.to_bytes(4, "big") + height.to_bytes(4, "big") + png[24:29]
    return png[:12] + ihdr + zlib.crc32(ihdr).to_bytes(4, "big") + png[33:]


def with_bogus_huffman_table(jpeg: bytes) -> bytes:
    """The JPEG with a Huffman table whose code counts exceed what 16 bits can hold: the
    header reads fine, decoders fail when they build the table."""
    dht = _segment(jpeg, (0xC4,))
    counts = dht + 5  # FF C4, length (2), class/id (1), then 16 code-length counts
    return jpeg[:counts] + bytes([255] * 16) + jpeg[counts + 16:]


def bmp_claiming_rows(bmp: bytes, rows: int) -> bytes:
    """The BMP with its header declaring ``rows`` rows (its pixel data stays as it is)."""
    return bmp[:22] + rows.to_bytes(4, "little", signed=True) + bmp[26:]


def bad_images(jpeg: bytes) -> dict[str, bytes]:
    """Named undecodable variants of ``jpeg`` (a baseline or progressive photo)."""
    return {
        "truncated JPEG": jpeg[: len(jpeg) // 2],
        "text file": b"label,score\nsquirrel,0.9\n" * 20,
        "random bytes": bytes((i * 7919 + 13) % 251 for i in range(4096)),
        "0x0 frame header": with_size(jpeg, 0, 0),
        "65500x65500 frame header": with_size(jpeg, 65500, 65500),
        "bogus Huffman table": with_bogus_huffman_table(jpeg),
    }
