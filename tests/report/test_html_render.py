"""report.html as people see it: rendered by a real browser (headless Chromium), every
histogram must show drawn bars; report.json's histograms must count every element."""

import json
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from harness.report.html import BAR_COLOUR
from tests.commands import harness
from tests.conftest import copy_photos

FEW = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def checked(server, photos_dir, tmp_path_factory):
    """An aligned check of a few photos, tensors saved; returns the report directory."""
    images = copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("images"))
    report = tmp_path_factory.mktemp("report")
    result = harness("check", images, "--url", server.grpc_url, "--report", report, "--save-tensors", html=True)
    assert result.returncode == 0, result.stderr
    return report


def screenshot(html_path, png_path, width=1200, height=14000):
    """Headless Chromium, as root, offline: no sandbox, no GPU, no network services."""
    assert CHROMIUM, "Debian's chromium is needed (apt-get install chromium)"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--force-color-profile=srgb", "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--screenshot={png_path}", f"--window-size={width},{height}", html_path.as_uri()],
                       check=True, capture_output=True, timeout=120)
    import cv2

    return cv2.cvtColor(cv2.imread(str(png_path)), cv2.COLOR_BGR2RGB)


def bands(mask_rows: np.ndarray, gap: int = 20) -> list[tuple[int, int]]:
    """Runs of rows holding marks, split where more than ``gap`` rows hold none."""
    rows = np.flatnonzero(mask_rows)
    if not len(rows):
        return []
    splits = np.flatnonzero(np.diff(rows) > gap)
    starts, ends = np.r_[rows[0], rows[splits + 1]], np.r_[rows[splits], rows[-1]]
    return list(zip(starts.tolist(), ends.tolist()))


def test_every_histogram_draws_its_bars_in_chromium(checked, tmp_path):
    html = (checked / "report.html").read_text()
    histograms = len(re.findall(r"<img class=histogram ", html))
    report = json.loads((checked / "report.json").read_text())
    assert histograms == sum(1 for s in report["stages"] if s["name"] != "topk") == 5
    # The heat maps and crops are hidden (their colours could pass for bars); the
    # histograms are the report's own images, rendered as the browser renders them.
    page = tmp_path / "histograms.html"
    page.write_text(html.replace("</style>", "img.heatmap, img.crops { visibility: hidden; }</style>", 1))
    pixels = screenshot(page, tmp_path / "histograms.png")
    assert pixels[:, 4:].max() > 0 and len(bands((pixels != 255).any(axis=(1, 2)))) > 5  # the page rendered
    bar = np.array([int(BAR_COLOUR[i:i + 2], 16) for i in (1, 3, 5)])
    bar_pixels = (np.abs(pixels.astype(int) - bar).max(axis=2) <= 2)
    drawn = [b for b in bands(bar_pixels.sum(axis=1) >= 3) if b[1] - b[0] >= 3]
    # One band of bar-coloured marks per histogram, in page order: none is empty axes.
    assert len(drawn) == histograms, drawn


def test_equal_stages_get_no_heat_maps(checked):
    html = (checked / "report.html").read_text()
    report = json.loads((checked / "report.json").read_text())
    sections = dict(re.findall(r"<h2>(\w+) <span[^>]*>\w+</span></h2>(.*?)(?=<h2>|$)", html, flags=re.S))
    for stage in report["stages"]:
        figures = len(re.findall(r"<img class=(?:heatmap|crops) ", sections[stage["name"]]))
        if stage["verdict"] == "equal":
            assert figures == 0, stage["name"]  # decode: one libjpeg-turbo on both sides
        elif stage["name"] in ("resize", "crop", "input"):
            assert figures > 0, stage["name"]
    assert next(s for s in report["stages"] if s["name"] == "decode")["verdict"] == "equal"


def test_histogram_counts_sum_to_the_compared_elements(checked):
    from harness.check import load_image_tensors

    report = json.loads((checked / "report.json").read_text())
    elements = {}
    for path in (checked / "tensors").glob("*.npz"):
        t = load_image_tensors(path)
        for stage, ref in t.reference.items():
            if stage in t.deployed and t.deployed[stage].shape == ref.shape:
                elements[stage] = elements.get(stage, 0) + ref.size
    for stage in report["stages"]:
        if stage["name"] == "topk":
            continue
        assert sum(stage["histogram"]) == elements[stage["name"]] > 0, stage["name"]


def test_report_md_says_each_thing_once(checked):
    text = (checked / "report.md").read_text()
    assert text.count("Metrics are per image") == 1 and text.count("No stage diverged") == 1
    prose = [line for line in text.splitlines() if line and not line.startswith("|")]
    assert len(prose) == len(set(prose))
