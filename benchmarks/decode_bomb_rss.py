"""The server's memory under files whose header declares far more pixels than their data
holds (issue 35): a 700-byte JPEG declaring 13000x13000 (its scan holds 64x64) and a PNG
likewise, sent 50 times each through ``classify_dali`` (HTTP and gRPC alternating) and the
DALI taps model of the embedded server (cpu profile). Before the evidence rule
(``harness.preprocessing.image_check.MIN_JPEG_BITS_PER_BLOCK``), the server decoded such a
file in full and about 0.9 GB stayed allocated; now each request is refused by the image
check before any decoder allocates. Printed: the resident memory (RSS) of the server and its
model processes before and after, and the growth. Target: < 100 MB; exit 1 otherwise.

    .venv/bin/python benchmarks/decode_bomb_rss.py [--requests 50]
"""

from __future__ import annotations

import argparse
import io
import os
import sys

import psutil
from PIL import Image

from harness.client import InferenceError, TritonClient
from harness.paths import DEFAULT_REPOSITORY
from harness.preflight.bad_images import png_with_size, with_size
from harness.server import group_members
from harness.session import embedded_server

LIMIT_MB = 100


def encoded(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 200, 30)).save(buf, fmt)
    return buf.getvalue()


def server_rss_mb(pid: int) -> float:
    total = 0
    for member in group_members(os.getpgid(pid)):
        try:
            total += psutil.Process(member).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2 ** 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50, help="requests of each file (default 50)")
    args = parser.parse_args()
    bombs = {"JPEG": with_size(encoded("JPEG"), 13000, 13000), "PNG": png_with_size(encoded("PNG"), 13000, 13000)}
    with embedded_server(DEFAULT_REPOSITORY) as server:
        good = (DEFAULT_REPOSITORY.parent / "data" / "photos" / "baboon.jpg").read_bytes()
        clients = [TritonClient(server.http_url, "http"), TritonClient(server.grpc_url, "grpc")]
        for client in clients:  # every model warm: its first real image allocated what it keeps
            client.classify([good], "dali")
            client.stages(good, "dali")
        before = server_rss_mb(server.process.pid)
        refused = {}
        for kind, bomb in bombs.items():
            for i in range(args.requests):
                client = clients[i % 2]
                for call in (lambda: client.classify([bomb], "dali"), lambda: client.stages(bomb, "dali")):
                    try:
                        call()
                    except InferenceError as exc:
                        refused.setdefault(kind, str(exc).splitlines()[0])
                    else:
                        print(f"{kind}: a request was answered, not refused")
        after = server_rss_mb(server.process.pid)
        label = clients[0].classify([good], "dali")[0][0].label
        for client in clients:
            client.close()
    print(f"{2 * args.requests} requests of each file (classify_dali + taps, HTTP and gRPC alternating)")
    for kind, message in refused.items():
        print(f"  {kind} ({len(bombs[kind])} bytes, declares 13000x13000): {message[:150]}")
    print(f"server RSS (tritonserver + model processes): before {before:.0f} MB, after {after:.0f} MB, "
          f"growth {after - before:+.1f} MB (limit {LIMIT_MB} MB); a photo still classifies: {label}")
    return 0 if after - before < LIMIT_MB and len(refused) == len(bombs) else 1


if __name__ == "__main__":
    sys.exit(main())
