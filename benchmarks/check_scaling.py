"""`harness check` at scale: flat memory, and wall time close to the work it must do.

1. Peak RSS of `harness check` on 50 vs 500 images (re-encoded variants of the real
   corpus), each in its own process against one running server. Target: within 20%.
2. Wall time of the 500-image check vs the sum of (a) the server's pipeline time (the same
   taps + ensemble requests, sequentially) and (b) the reference pipeline time (recipe +
   reference model, sequentially, after a warm-up) on the same images, all measured in
   this run. Target: at most 1.2x. Also printed: the cores the check kept busy and its CPU
   time per image, in its own process and in the server: a CPU-bound check cannot beat its
   work by more concurrency, only by less work.

    .venv/bin/python benchmarks/check_scaling.py [--large 500] [--small 50]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from timing import server_cpu_seconds

from harness.corpus import list_images, make_variants
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.session import Session, embedded_server


def child(argv: list[str]) -> None:
    """Run `harness check` in this process and print its peak RSS (MiB) and wall time."""
    from harness.cli import main

    start = time.perf_counter()
    status = main(argv)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT {status} {peak_mib:.1f} {time.perf_counter() - start:.2f}")


@dataclass(frozen=True)
class CheckRun:
    peak_mib: float
    seconds: float
    check_cpu_s: float
    """CPU seconds of the `harness check` process."""
    server_cpu_s: float
    """CPU seconds of the server and its model processes meanwhile."""


def run_check(images_dir: Path, url: str, report: Path, server: psutil.Process) -> CheckRun:
    cmd = [sys.executable, __file__, "--child", "check", str(images_dir), "--url", url, "--report", str(report)]
    before, server_before = resource.getrusage(resource.RUSAGE_CHILDREN), sum(server_cpu_seconds(server).values())
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, status, peak, seconds = next(line for line in out.splitlines() if line.startswith("RESULT")).split()
    check_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return CheckRun(float(peak), float(seconds), check_cpu, sum(server_cpu_seconds(server).values()) - server_before)


def baseline(images: list[Path], url: str) -> tuple[float, float]:
    """(server pipeline seconds, reference pipeline seconds), each run sequentially."""
    from harness.client import TritonClient

    datas = [p.read_bytes() for p in images]
    client = TritonClient(url, "grpc")
    session = Session(DEFAULT_REPOSITORY)
    recipe, model = session.recipe(), session.reference_model()

    def seconds(pipeline) -> float:
        for data in datas[:8]:  # warm-up: PyTorch's first calls are several times slower
            pipeline(data)
        start = time.perf_counter()
        for data in datas:
            pipeline(data)
        return time.perf_counter() - start

    return (seconds(lambda data: client.deployed(data, "dali")),
            seconds(lambda data: model.logits(recipe(data)["input"][None])))


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
        for p in variants[:n]:  # hard links: a link leading outside the folder is not an input
            if (d / p.name).is_symlink():
                (d / p.name).unlink()
            if not (d / p.name).exists():
                os.link(p, d / p.name)
        sets[n] = d
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        process = psutil.Process(server.process.pid)
        runs = {n: run_check(d, server.grpc_url, BUILD_DIR / f"bench-report-{n}", process) for n, d in sets.items()}
        server_s, reference_s = baseline(list_images(sets[args.large]), server.grpc_url)
    small, large = runs[args.small], runs[args.large]
    print(f"\npeak RSS: {args.small} images {small.peak_mib:.0f} MiB, {args.large} images {large.peak_mib:.0f} MiB, "
          f"ratio {large.peak_mib / small.peak_mib:.2f} (target < 1.20)")
    busy = (large.check_cpu_s + large.server_cpu_s) / large.seconds
    print(f"{args.large} images: harness check {large.seconds:.1f} s, {busy:.2f} cores busy; CPU ms per image: "
          f"check process {1000 * large.check_cpu_s / args.large:.1f}, server {1000 * large.server_cpu_s / args.large:.1f}")
    print(f"server pipeline {server_s:.1f} s + reference pipeline {reference_s:.1f} s = {server_s + reference_s:.1f} s; "
          f"check/pipelines {large.seconds / (server_s + reference_s):.2f} (target <= 1.2)")

if __name__ == "__main__":
    main()
