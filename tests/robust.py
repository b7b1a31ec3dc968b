"""Helpers of the robustness tests (issue 25): hostile folders made of real photos, strict
reading of what a run wrote, and the equalities a resumed run must meet."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.paths import PROJECT_ROOT
from tests.commands import report_formats

HOSTILE_NAMES = {
    # name (bytes) -> corpus photo it holds
    b"bad\xff\xfename.jpg": "baboon.jpg",
    b"y" * 246 + b".jpg": "fruits.jpg",  # 250 bytes: a visual named after it passed 255
    b"$\\undefinedcmd$.jpg": "orange.jpg",  # mathtext in a matplotlib title
    b"<img src=x onerror=alert(1)>|cell.jpg": "messi5.jpg",
    b"=HYPERLINK(\"x\").jpg": "squirrel_cls.jpg",
    b"[bold red]rich[reverse].jpg": "starry_night.jpg",
    b"esc\x1b[2Jape.jpg": "grace_hopper.jpg",
}


def hostile_folder(photos_dir: Path, directory: Path) -> Path:
    """Real photos under hostile names, beside every kind of entry that is not an input: links
    inside and outside the folder, a dangling link, a loop, a FIFO, a subfolder, a hidden file."""
    directory.mkdir(parents=True)
    raw = os.fsencode(directory)
    for name, photo in HOSTILE_NAMES.items():
        shutil.copy(photos_dir / photo, os.fsdecode(raw + b"/" + name))
    (directory / "inside.jpg").symlink_to("$\\undefinedcmd$.jpg")
    (directory / "passwd.jpg").symlink_to("/etc/passwd")
    (directory / "environ.jpg").symlink_to("/proc/self/environ")
    (directory / "dangling.jpg").symlink_to("gone.jpg")
    (directory / "loop.jpg").symlink_to("loop.jpg")
    os.mkfifo(directory / "fifo.jpg")
    (directory / "sub").mkdir()
    (directory / ".hidden").write_bytes(b"x")
    return directory


def strict_json(path: Path):
    """``path`` parsed as strict JSON (a bare NaN or Infinity fails)."""
    def refuse(constant):
        raise AssertionError(f"{path}: bare {constant} is not JSON")
    return json.loads(path.read_bytes(), parse_constant=refuse)


def strict_jsonl(path: Path) -> list[dict]:
    def refuse(constant):
        raise AssertionError(f"{path}: bare {constant} is not JSON")
    return [json.loads(line, parse_constant=refuse) for line in path.read_bytes().splitlines()]


def counts_add_up(report: dict) -> int:
    """images = compared + failed + rejected + skipped (the report's own figures); returns images."""
    rejected = sum(len(rows) for rows in report["rejected"].values())
    assert report["images"] == report["compared"] + len(report["failed"]) + rejected + len(report["skipped"]), report
    return report["images"]


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def assert_same_run(a: Path, b: Path) -> None:
    """Two report directories hold the same results: report.json (but its run time), report.md,
    per_image.csv and images.jsonl (rows in any order), each image once."""
    ra, rb = strict_json(a / "report.json"), strict_json(b / "report.json")
    ra["run"].pop("seconds")
    rb["run"].pop("seconds")
    assert ra == rb, differences(ra, rb)
    assert (a / "report.md").read_text() == (b / "report.md").read_text()
    rows_a, rows_b = csv_rows(a / "per_image.csv"), csv_rows(b / "per_image.csv")
    assert rows_a[0] == rows_b[0] and sorted(rows_a[1:]) == sorted(rows_b[1:])
    lines_a, lines_b = strict_jsonl(a / "images.jsonl"), strict_jsonl(b / "images.jsonl")
    key = lambda r: r["image"]  # noqa: E731
    assert sorted(lines_a, key=key) == sorted(lines_b, key=key)
    assert len({r["image"] for r in lines_a}) == len(lines_a) == ra["images"]


def differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ, as ``path: a != b`` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(a.keys() | b.keys()) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r:.200} != {b!r:.200}"]


def start_harness(*args, html: bool = False, **kwargs) -> subprocess.Popen:
    """``harness ARGS`` started (stdout and stderr piped, text), in the project root; report.html
    only with ``html`` (:func:`tests.commands.report_formats`)."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env.update(report_formats(args, html, env))
    return subprocess.Popen([sys.executable, "-m", "harness", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, env=env, **kwargs)


def wait_for_records(report: Path, count: int, process: subprocess.Popen, timeout: float = 300) -> int:
    """Wait until images.jsonl of ``report`` holds ``count`` records (or ``process`` ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            lines = (report / "images.jsonl").read_bytes().count(b"\n")
        except FileNotFoundError:
            lines = 0
        if lines >= count or process.poll() is not None:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{report}: fewer than {count} records after {timeout} s")


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-3000:]
