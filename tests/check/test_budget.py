"""harness/check/budget.py: images in flight bounded by their decoded size, not only their
count. Huge PNGs (tiny files that decode to hundreds of MB) against the real server."""

import os
import re
import subprocess
import sys
import threading
import time

from harness.check.budget import BYTES_PER_DECODED_BYTE, MemoryBudget, estimated_bytes
from harness.listing import InputFile
from tests.huge_png import RSS_WRAPPER, huge_png
from tests.robust import counts_add_up, no_traceback, strict_json

SIDE = 8000
"""192 MB decoded (a 1.15 GB estimate): large enough to see, small enough for a shared machine."""


def test_the_estimate_reads_the_header_only(tmp_path, photos_dir):
    png = huge_png(tmp_path / "huge.png", SIDE)
    assert png.stat().st_size < 2 ** 20
    assert estimated_bytes(InputFile.of(png)) == png.stat().st_size + SIDE * SIDE * 3 * BYTES_PER_DECODED_BYTE
    (tmp_path / "text.jpg").write_bytes(b"not an image")
    assert estimated_bytes(InputFile.of(tmp_path / "text.jpg")) == 12  # its size: it fails at once
    os.mkfifo(tmp_path / "fifo")
    assert estimated_bytes(InputFile.of(tmp_path / "fifo")) == 0  # never opened for reading


def test_an_image_of_extreme_shape_costs_its_resized_size(tmp_path, spec):
    """A 640 x 1 image resizes to 256 rows of 163,840 under a shorter side of 256: its resized
    stages, not its 640 decoded pixels, hold the memory (the fuzz corpus's SOF edits)."""
    from PIL import Image

    from harness.check.budget import resized_by

    Image.new("RGB", (640, 1), (90, 120, 30)).save(tmp_path / "line.jpg")
    file, size = InputFile.of(tmp_path / "line.jpg"), (tmp_path / "line.jpg").stat().st_size
    assert estimated_bytes(file) == size + 640 * 3 * BYTES_PER_DECODED_BYTE
    height, width = resized_by(spec)(1, 640)
    assert height == 256 and width == 640 * 256
    assert MemoryBudget(resized=resized_by(spec)).cost(file) == size + height * width * 3 * BYTES_PER_DECODED_BYTE


def test_the_budget_holds_what_fits_and_lets_a_larger_one_run_alone():
    budget, order = MemoryBudget(limit=100), []
    budget.acquire(60)
    second = threading.Thread(target=lambda: (budget.acquire(60), order.append("second")))
    second.start()
    time.sleep(0.2)
    assert order == [] and budget.held == 60  # 120 > 100: waits
    budget.release(60)
    second.join(5)
    assert order == ["second"] and budget.held == 60
    budget.release(60)
    budget.acquire(500)  # alone, over the limit: goes
    assert budget.held == budget.peak == 500


def _check_rss(folder, url, report, *options) -> tuple[subprocess.CompletedProcess, int]:
    result = subprocess.run([sys.executable, "-c", RSS_WRAPPER, "check", str(folder), "--url", url, "--report",
                             str(report), "--no-isolate", *options], capture_output=True, text=True, timeout=1200)
    no_traceback(result.stderr)
    return result, int(re.findall(r"peak RSS kB (\d+)", result.stderr)[-1]) * 1024


def test_huge_pngs_under_a_budget_run_one_at_a_time(server, photos_dir, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    (small / "baboon.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes())
    _, baseline = _check_rss(small, server.grpc_url, tmp_path / "r0")
    huge = tmp_path / "huge"
    huge.mkdir()
    huge_png(huge / "a.png", SIDE)
    for name in ("b.png", "c.png", "d.png", "e.png", "f.png"):
        os.link(huge / "a.png", huge / name)
    (huge / "baboon.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes())
    result, peak = _check_rss(huge, server.grpc_url, tmp_path / "r", "--memory-budget", "1024", "--workers", "6")
    assert result.returncode == 0, result.stderr[-2000:]
    report = strict_json(tmp_path / "r" / "report.json")
    assert counts_add_up(report) == report["compared"] == 7
    one = estimated_bytes(InputFile.of(huge / "a.png"))
    # One huge image in flight at a time (its estimate is over the budget): the peak is the
    # baseline and one image. (Without the budget, six in flight: +2.15 GB, 1.9 estimates.)
    assert peak - baseline < 1.25 * one, (peak, baseline, one)
