"""How far is Locust itself the bottleneck? Locust's QPS / wrk's QPS on the same load.

Both tools drive the same ensemble over HTTP with the same number of concurrent
connections and the same request (one photo, top-5 classes): wrk (Debian's, written in
C) replays a prebuilt Triton binary-tensor request body (JSON header + raw bytes, header
``Inference-Header-Content-Length``); Locust runs loadtest/locustfile.py with a photo
directory holding only that photo. Each gets a warm-up, then the same measured duration,
in this one run. Printed: each tool's QPS and latency percentiles, and Locust / wrk.
A ratio near 1.0 means the server, not Locust, sets the pace.

    .venv/bin/python benchmarks/locust_vs_wrk.py [--clients 2] [--seconds 10] [--ensemble classify_dali]
    .venv/bin/python benchmarks/locust_vs_wrk.py --url 127.0.0.1:8000   # a running server
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from rich.console import Console

from loadtest.locust_control import LocalLocust
from loadtest.sweep import DEFAULT_IMAGES, Point, SweepConfig, run_point
from loadtest.triton import Endpoints, ServerNotReady, check_ready, ensemble_models

TOP_K = 5


@dataclass(frozen=True)
class ToolResult:
    tool: str
    qps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    failures: int


def request_body(photo: bytes) -> tuple[bytes, int]:
    """Triton's HTTP binary-tensor request for one photo: (body, length of its JSON header)."""
    data = np.frombuffer(photo, np.uint8)[None]
    tensor = httpclient.InferInput("IMAGE", list(data.shape), "UINT8")
    tensor.set_data_from_numpy(data, binary_data=True)
    output = httpclient.InferRequestedOutput("PROBABILITIES", class_count=TOP_K, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=[output])
    return body, json_size


def wrk_script(body_file: Path, json_size: int) -> str:
    return "\n".join([
        f'local f = io.open("{body_file}", "rb")',
        "wrk.body = f:read(\"*a\")",
        "f:close()",
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/octet-stream"',
        f'wrk.headers["Inference-Header-Content-Length"] = "{json_size}"',
        "",
    ])


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _duration_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * _UNITS[unit]


def parse_wrk(output: str) -> ToolResult:
    """QPS, latency percentiles and non-2xx count from ``wrk --latency`` output."""
    qps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    percentiles = {int(p): _duration_ms(v) for p, v in re.findall(r"^\s+(\d+)%\s+(\S+)$", output, re.M)}
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    failures = (int(non_2xx.group(1)) if non_2xx else 0) + (sum(map(int, errors.groups())) if errors else 0)
    return ToolResult("wrk", qps, percentiles[50], percentiles[90], percentiles[99], failures)


def run_wrk(url: str, script: Path, clients: int, seconds: float) -> ToolResult:
    threads = min(clients, 2)  # wrk needs connections >= threads; more threads than cores only compete
    cmd = ["wrk", f"-t{threads}", f"-c{clients}", f"-d{seconds:.0f}s", "--latency", "-s", str(script), url]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=True)
    return parse_wrk(result.stdout)


@contextlib.contextmanager
def server_endpoints(url: str | None, metrics_url: str | None):
    if url:
        yield Endpoints.from_url(url, metrics=metrics_url)
        return
    from harness.paths import DEFAULT_REPOSITORY
    from harness.session import embedded_server

    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        yield Endpoints(server.http_url, server.grpc_url, server.metrics_url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="HTTP host:port of a running server (default: embedded)")
    parser.add_argument("--metrics-url", default=None, help="default: http://<--url host>:8002/metrics")
    parser.add_argument("--ensemble", default="classify_dali")
    parser.add_argument("--clients", type=int, default=2, help="concurrent connections (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per tool (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="per tool, not measured (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="wrk then Locust, this many times (default: %(default)s)")
    parser.add_argument("--photo", type=Path, default=DEFAULT_IMAGES / "squirrel_cls.jpg")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("error: wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 2

    photo = args.photo.read_bytes()
    body, json_size = request_body(photo)
    with tempfile.TemporaryDirectory(prefix="locust-vs-wrk-") as tmp, server_endpoints(args.url, args.metrics_url) as endpoints:
        tmp = Path(tmp)
        try:
            check_ready(endpoints, [args.ensemble], ["http"])
        except ServerNotReady as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        infer_url = f"http://{endpoints.http}/v2/models/{args.ensemble}/infer"
        # The prebuilt body must be a request the server answers (urlopen raises unless it is 200).
        request = urllib.request.Request(infer_url, data=body, method="POST", headers={
            "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(json_size)})
        urllib.request.urlopen(request, timeout=60).close()
        (tmp / "body.bin").write_bytes(body)
        script = tmp / "triton.lua"
        script.write_text(wrk_script(tmp / "body.bin", json_size))

        photos = tmp / "photos"
        photos.mkdir()
        (photos / args.photo.name).write_bytes(photo)
        config = SweepConfig(warmup=args.warmup, duration=args.seconds)
        point = Point("http", args.ensemble, args.clients)
        models = ensemble_models(endpoints, args.ensemble)
        rounds: list[tuple[ToolResult, ToolResult]] = []
        console = Console(stderr=True)
        with LocalLocust({"images": photos}, log_dir=tmp / "logs") as locust:
            # Alternate the tools, so a change of the machine's load affects both alike.
            for i in range(1, args.rounds + 1):
                with console.status(f"round {i}/{args.rounds}: wrk"):
                    run_wrk(infer_url, script, args.clients, args.warmup)  # warm-up, not measured
                    wrk = run_wrk(infer_url, script, args.clients, args.seconds)
                with console.status(f"round {i}/{args.rounds}: Locust"):
                    stats = run_point(locust, endpoints, point, config, models).stats
                rounds.append((wrk, ToolResult("Locust", stats.qps, stats.p50_ms, stats.p90_ms, stats.p99_ms,
                                                stats.error_count)))

    print(f"{args.ensemble} over HTTP, {args.clients} connections, {args.rounds} rounds of {args.seconds:.0f} s "
          f"per tool, photo {args.photo.name} ({len(photo)} bytes)")
    print("| round | tool | QPS | TP50 ms | TP90 ms | TP99 ms | failures |\n|---:|---|---:|---:|---:|---:|---:|")
    for i, pair in enumerate(rounds, 1):
        for r in pair:
            print(f"| {i} | {r.tool} | {r.qps:.1f} | {r.p50_ms:.1f} | {r.p90_ms:.1f} | {r.p99_ms:.1f} | {r.failures} |")
    wrk_qps = sum(w.qps for w, _ in rounds) / len(rounds)
    locust_qps = sum(lo.qps for _, lo in rounds) / len(rounds)
    print(f"mean QPS: wrk {wrk_qps:.1f}, Locust {locust_qps:.1f}")
    print(f"Locust QPS / wrk QPS = {locust_qps / wrk_qps:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
