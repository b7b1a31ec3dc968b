"""What the validate_image step costs classify_dali (cpu profile, real photos, gRPC).

Three variants of the repository, served one after the other by the embedded server:
``decode`` (the checked-in config: JPEGs decoded at 1/8 size before DALI), ``header``
(signature, structure and dimensions only) and ``none`` (the ensemble without the step,
as before it existed; one bad image then fails its whole DALI batch). Printed: latency
p50/p95 at 1 client, images/s at 4 clients, and each against ``none``, in this one run.

    .venv/bin/python benchmarks/validation_cost.py [--requests 300] [--seconds 15]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import measure

from harness.client import TritonClient
from harness.corpus import list_images
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.repository import CONFIG_FILENAME, build_cpu_profile, load_config, save_config
from harness.server import TritonServer, free_port


def variant(repo: Path, validation: str) -> None:
    """Rewrite a built profile in place for one variant of the validation step."""
    if validation == "none":
        path = repo / "classify_dali" / CONFIG_FILENAME
        config = load_config(path)
        steps = list(config.ensemble_scheduling.step)
        assert steps[0].model_name == "validate_image"
        steps[1].input_map["IMAGE"] = "IMAGE"
        del config.ensemble_scheduling.step[:]
        config.ensemble_scheduling.step.extend(steps[1:])
        save_config(config, path)
        shutil.rmtree(repo / "validate_image")
    else:
        path = repo / "validate_image" / CONFIG_FILENAME
        config = load_config(path)
        config.parameters["validation"].string_value = validation
        save_config(config, path)


def latencies(url: str, images: list[bytes], requests: int) -> np.ndarray:
    with TritonClient(url, "grpc") as client:
        for data in images[:10]:  # warm up
            client.classify([data], "dali", top_k=1)
        out = []
        for i in range(requests):
            start = time.perf_counter()
            client.classify([images[i % len(images)]], "dali", top_k=1)
            out.append(time.perf_counter() - start)
    return np.array(out) * 1e3


def throughput(url: str, images: list[bytes], clients: int, seconds: float) -> float:
    connections = [TritonClient(url, "grpc") for _ in range(clients)]
    try:
        return measure([lambda data, c=c: c.classify([data], "dali", top_k=1) for c in connections], images, seconds)
    finally:
        for c in connections:
            c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="sequential requests for latency (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=15.0, help="throughput window (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    images = [p.read_bytes() for p in list_images(DEFAULT_PHOTOS)]
    results = {}
    BUILD_DIR.mkdir(exist_ok=True)
    for validation in ("none", "header", "decode"):
        with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp:
            repo = build_cpu_profile(DEFAULT_REPOSITORY, Path(tmp) / "repository")
            variant(repo, validation)
            with TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port()) as server:
                lat = latencies(server.url("grpc"), images, args.requests)
                rate = throughput(server.url("grpc"), images, args.clients, args.seconds)
        results[validation] = (float(np.percentile(lat, 50)), float(np.percentile(lat, 95)), rate)
        print(f"{validation:>6}: p50 {results[validation][0]:.2f} ms, p95 {results[validation][1]:.2f} ms, "
              f"{rate:.1f} img/s at {args.clients} clients", flush=True)
    base = results["none"]
    for validation in ("header", "decode"):
        p50, p95, rate = results[validation]
        print(f"{validation} vs none: p50 +{p50 - base[0]:.2f} ms ({p50 / base[0]:.2f}x), "
              f"p95 {p95 / base[1]:.2f}x, throughput {rate / base[2]:.2f}x")


if __name__ == "__main__":
    main()
