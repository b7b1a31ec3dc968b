"""`harness check` at scale: flat memory, and wall time close to the work it must do.

1. Peak RSS of `harness check` on 50 vs 500 images (re-encoded variants of the real
   corpus), each in its own process against one running server. Target: within 20%.
2. Wall time of the 500-image check vs the sum of (a) the server's pipeline time (the same
   taps + ensemble requests, sequentially) and (b) the reference pipeline time (recipe +
   reference model, sequentially) on the same images, all measured in this run.
   Target: at most 1.5x.

    .venv/bin/python benchmarks/check_scaling.py [--large 500] [--small 50]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

from harness.corpus import list_images, make_variants
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.session import embedded_server


def child(argv: list[str]) -> None:
    """Run `harness check` in this process and print its peak RSS (MiB) and wall time."""
    from harness.cli import main

    start = time.perf_counter()
    status = main(argv)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT {status} {peak_mib:.1f} {time.perf_counter() - start:.2f}")


def run_check(images_dir: Path, url: str, report: Path) -> tuple[float, float]:
    cmd = [sys.executable, __file__, "--child", "check", str(images_dir), "--url", url, "--report", str(report)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    _, status, peak, seconds = next(line for line in out.splitlines() if line.startswith("RESULT")).split()
    return float(peak), float(seconds)


def baseline(images: list[Path], url: str) -> tuple[float, float]:
    """(server pipeline seconds, reference pipeline seconds), each run sequentially."""
    from harness.client import TritonClient
    from harness.model import ONNX_FILENAME
    from harness.reference import load_recipe
    from harness.reference.model import load_reference_model
    from harness.spec import SPEC_FILENAME, load_spec

    datas = [p.read_bytes() for p in images]
    client = TritonClient(url, "grpc")
    start = time.perf_counter()
    for data in datas:
        client.deployed(data, "dali")
    server_seconds = time.perf_counter() - start
    spec = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME)
    recipe = load_recipe(spec)
    model = load_reference_model(DEFAULT_REPOSITORY / "classifier" / ONNX_FILENAME)
    start = time.perf_counter()
    for data in datas:
        model.logits(recipe(data)["input"][None])
    return server_seconds, time.perf_counter() - start


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=500)
    args = parser.parse_args()

    variants = make_variants(list_images(DEFAULT_PHOTOS), BUILD_DIR / "bench-variants", args.large)
    sets = {}
    for n in (args.small, args.large):
        d = BUILD_DIR / f"bench-{n}"
        d.mkdir(exist_ok=True)
        for p in variants[:n]:
            if not (d / p.name).exists():
                (d / p.name).symlink_to(p)
        sets[n] = d
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        rss = {n: run_check(d, server.grpc_url, BUILD_DIR / f"bench-report-{n}") for n, d in sets.items()}
        server_s, reference_s = baseline(list_images(sets[args.large]), server.grpc_url)
    (small_rss, _), (large_rss, large_s) = rss[args.small], rss[args.large]
    print(f"\npeak RSS: {args.small} images {small_rss:.0f} MiB, {args.large} images {large_rss:.0f} MiB, "
          f"ratio {large_rss / small_rss:.2f} (target < 1.20)")
    print(f"{args.large} images: harness check {large_s:.1f} s; server pipeline {server_s:.1f} s + reference "
          f"pipeline {reference_s:.1f} s = {server_s + reference_s:.1f} s; ratio {large_s / (server_s + reference_s):.2f} "
          "(target <= 1.5)")


if __name__ == "__main__":
    main()
