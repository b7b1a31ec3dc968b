"""The memory budget of `harness check` (harness/check/budget.py), measured: the peak RSS of
the check process (and of the server's process tree) on huge PNGs, tiny files that decode to
hundreds of MB, with and without a budget; and one image alone, which gives the bytes a check
holds per decoded byte (BYTES_PER_DECODED_BYTE).

    .venv/bin/python benchmarks/memory_budget.py [--url HOST:PORT] [--side 13000 --copies 4 --budgets 2048]

Default: one corpus photo (the baseline), one 13000² PNG alone, four 13000² PNGs under a
2048 MiB budget (each over it: one at a time), six 8000² PNGs without a budget and under
1024 MiB. Each run is its own process against one server.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.huge_png import RSS_WRAPPER, huge_png  # noqa: E402


def server_peak(pid: int, stop: threading.Event, out: list[int]) -> None:
    import psutil

    root = psutil.Process(pid)
    while not stop.is_set():
        try:
            out[0] = max(out[0], sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.1)


def run(folder: Path, url: str, budget: int, workers: int, server_pid: int | None) -> tuple[float, float, float, int]:
    """(check's peak RSS GB, server tree's peak RSS GB, seconds, exit status)."""
    stop, peak = threading.Event(), [0]
    watcher = threading.Thread(target=server_peak, args=(server_pid, stop, peak)) if server_pid else None
    if watcher:
        watcher.start()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as report:
        result = subprocess.run([sys.executable, "-c", RSS_WRAPPER, "check", str(folder), "--url", url, "--report",
                                 report, "--memory-budget", str(budget), "--workers", str(workers)],
                                capture_output=True, text=True)
    seconds = time.perf_counter() - start
    stop.set()
    if watcher:
        watcher.join()
    rss = int(re.findall(r"peak RSS kB (\d+)", result.stderr)[-1]) * 1024
    return rss / 1e9, peak[0] / 1e9, seconds, result.returncode


def folder_of(base: Path, name: str, side: int | None, copies: int) -> Path:
    folder = base / name
    folder.mkdir()
    (folder / "baboon.jpg").write_bytes((DEFAULT_PHOTOS / "baboon.jpg").read_bytes())
    if side:
        first = huge_png(folder / "huge0.png", side)
        for i in range(1, copies):
            os.link(first, folder / f"huge{i}.png")
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="gRPC host:port of a running server (default: an embedded one)")
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    BUILD_DIR.mkdir(exist_ok=True)
    with ExitStack() as stack:
        pid = None
        if args.url:
            url = args.url
        else:
            server = stack.enter_context(embedded_server(DEFAULT_REPOSITORY, None))
            url, pid = server.grpc_url, server.process.pid
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memory-", dir=BUILD_DIR)))
        cases = [("1 corpus photo", folder_of(work, "photo", None, 0), 2048),
                 ("13000² PNG alone + 1 photo", folder_of(work, "one", 13000, 1), 2048),
                 ("13000² PNG x 4 + 1 photo", folder_of(work, "four", 13000, 4), 2048),
                 ("8000² PNG x 6 + 1 photo", folder_of(work, "six", 8000, 6), 100000),
                 ("8000² PNG x 6 + 1 photo", work / "six", 1024)]
        print(f"workers {args.workers}; estimate per image: file + {6} x decoded RGB bytes")
        print(f"{'images':<28} {'budget MiB':>10} {'check peak GB':>13} {'server peak GB':>14} {'seconds':>8} exit")
        for label, folder, budget in cases:
            check, served, seconds, status = run(folder, url, budget, args.workers, pid)
            print(f"{label:<28} {budget:>10} {check:>13.2f} {served:>14.2f} {seconds:>8.0f} {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
