"""The server under decode bombs of every format (issues 35 and 45): a file of a few hundred
bytes whose header declares SIDE x SIDE pixels (``tests/attack_files.py``: Huffman and
arithmetic JPEG, PNG, lossless and lossy WebP, BMP uncompressed and RLE, TIFF uncompressed,
deflate, LZW, PackBits and CCITT, GIF, JPEG 2000, PNM), sent to both ensembles of every task
(``classify_``, ``detect_``, ``segment_``, ``ocr_`` ``dali`` and ``opencv``) of the embedded
server (cpu profile), HTTP and gRPC alternating, naming no outputs (a client that names none
gets every output). With ``--internal``, also to every model of the repository that takes an
encoded IMAGE alone (called directly, as whoever reaches the port can). With ``--third``, the
third round's files instead (issue 58, ``tests/attack_files.third_round``: 20,000 repeated AC
scans, 1-bit PNGs plain and interlaced, a 16-bit RGBA PNG, a 1-bit LZW TIFF, a packed P1 PBM, a
flat JPEG 2000) and a PNG just over segmentation's ``max_output_pixels``.

Printed per format and model: requests refused / answered, the slowest request, the largest
answer (bytes of its output tensors), the server's resident memory (tritonserver and its model
processes) after that model's requests; at the end the growth over the whole run. Target: every
request refused, growth < 100 MB, a photo still classified; exit 1 otherwise.

    .venv/bin/python benchmarks/decode_bomb_rss.py [--side 13376] [--requests 2] [--internal]
        [--models classify_opencv,...] [--formats "WebP (lossless);GIF"] [--timeout 120] [--third]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import DEFAULT_REPOSITORY  # noqa: E402
from harness.server import group_members  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.attack_files import BOMBS, SIDE, flat_png, third_round  # noqa: E402

LIMIT_MB = 100
OVER_CEILING = "PNG, 5793x5793, over max_output"
"""A flat PNG just over segmentation's max_output_pixels: sent to the segmentation ensembles only
(the other tasks answer it, as they should)."""
ENSEMBLES = ("classify_dali", "classify_opencv", "detect_dali", "detect_opencv", "segment_dali", "segment_opencv",
             "ocr_dali", "ocr_opencv")


def server_rss_mb(pid: int) -> float:
    total = 0
    for member in group_members(os.getpgid(pid)):
        try:
            total += psutil.Process(member).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2 ** 20


def clients(server, timeout: float):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    return [(httpclient, httpclient.InferenceServerClient(server.http_url, network_timeout=timeout,
                                                          connection_timeout=timeout)),
            (grpcclient, grpcclient.InferenceServerClient(server.grpc_url))]


def send(module, client, model: str, data: bytes, timeout: float) -> tuple[bool, int, str]:
    """(answered, bytes of the answer's outputs, the refusal's first line)."""
    tensor = module.InferInput("IMAGE", [1, len(data)], "UINT8")
    tensor.set_data_from_numpy(np.frombuffer(data, np.uint8)[None])
    try:
        kwargs = {"client_timeout": timeout} if module.__name__.endswith("grpc") else {}
        result = client.infer(model, [tensor], **kwargs)
    except Exception as exc:  # noqa: BLE001 - every refusal is a row
        return False, 0, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    outputs = result.get_response()["outputs"] if module.__name__.endswith("http") else result.get_response().outputs
    names = [o["name"] if isinstance(o, dict) else o.name for o in outputs]
    return True, sum(np.asarray(result.as_numpy(n)).nbytes for n in names), ""


def image_models(server) -> list[str]:
    """The repository's models whose only input is an encoded IMAGE."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    found = []
    for model in client.get_model_repository_index(as_json=True).get("models", []):
        inputs = client.get_model_config(model["name"], as_json=True)["config"].get("input", [])
        if [i["name"] for i in inputs] == ["IMAGE"]:
            found.append(model["name"])
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=SIDE, help=f"the side each bomb declares (default {SIDE})")
    parser.add_argument("--requests", type=int, default=2, help="requests of each file to each model (default 2)")
    parser.add_argument("--models", default=",".join(ENSEMBLES), help="models to send them to (comma separated)")
    parser.add_argument("--internal", action="store_true", help="also every model that takes an IMAGE alone")
    parser.add_argument("--formats", default=";".join(BOMBS),
                        help="bombs to send (names of tests/attack_files.BOMBS, separated by ;)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a request may take (default 120)")
    parser.add_argument("--third", action="store_true", help="the third round's files (issue 58) instead of the bombs")
    args = parser.parse_args()
    photos = DEFAULT_REPOSITORY.parent / "data" / "photos"
    good = (photos / "baboon.jpg").read_bytes()
    if args.third:
        bombs = {**third_round((photos / "retina.jpg").read_bytes()), OVER_CEILING: flat_png(5793)}
    else:
        bombs = {name: BOMBS[name](args.side) for name in args.formats.split(";")}
    failures = 0
    with embedded_server(DEFAULT_REPOSITORY) as server:
        models = args.models.split(",")
        if args.internal:
            models += [m for m in image_models(server) if m not in models]
        ways = clients(server, args.timeout)
        for model in models:  # every model warm: its first real image allocated what it keeps
            for module, client in ways:
                answered, _, why = send(module, client, model, good, args.timeout)
                assert answered, f"{model} refused a photo: {why}"
        before = server_rss_mb(server.process.pid)
        declaring = "" if args.third else f" declaring {args.side}x{args.side}"
        print(f"{len(bombs)} files{declaring}, {args.requests} requests each to {len(models)} "
              f"models (HTTP and gRPC alternating, no outputs named); server RSS {before:.0f} MB")
        print(f"{'format':32} {'bytes':>7} {'model':22} {'refused':>7} {'answered':>8} {'slowest':>8} "
              f"{'largest answer':>14} {'RSS after':>9}  refusal")
        for name, bomb in bombs.items():
            for model in (m for m in models if name != OVER_CEILING or m.startswith("segment_")):
                refused = answered = 0
                slowest, largest, why = 0.0, 0, ""
                for i in range(args.requests):
                    module, client = ways[i % 2]
                    start = time.perf_counter()
                    ok, size, message = send(module, client, model, bomb, args.timeout)
                    slowest = max(slowest, time.perf_counter() - start)
                    answered += ok
                    refused += not ok
                    largest = max(largest, size)
                    why = why or message
                failures += answered
                print(f"{name[:32]:32} {len(bomb):7d} {model:22} {refused:7d} {answered:8d} {slowest:7.2f}s "
                      f"{largest / 1e6:11.1f} MB {server_rss_mb(server.process.pid):7.0f} MB  {why[:110]}", flush=True)
        after = server_rss_mb(server.process.pid)
        answered, _, why = send(*ways[1], "classify_dali", good, args.timeout)
        for _, client in ways:
            client.close()
    print(f"server RSS (tritonserver + model processes): before {before:.0f} MB, after {after:.0f} MB, "
          f"growth {after - before:+.1f} MB (limit {LIMIT_MB} MB); requests answered {failures} (target 0); a photo "
          f"still classified: {answered} {why}")
    return 0 if after - before < LIMIT_MB and failures == 0 and answered else 1


if __name__ == "__main__":
    sys.exit(main())
