"""Load tests of the text detector's ensembles against the embedded server: the Locust user
asks a detector for its boxes (no class_count), and the sweep compares CPU decode
(detect_opencv) with GPU decode (detect_dali) as it does the classifier's. About 0.6 s an image
on these 2 cores: a few seconds a point."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.loadtest.test_locustfile import locust, read_csv
from tests.loadtest.test_sweep import against, sweep

TEXT_PHOTOS = ("grace_hopper.jpg", "LinuxLogo.jpg", "WindowsLogo.jpg", "board.jpg", "fruits.jpg", "baboon.jpg")
"""Photos with text and without: the users' rotation, and the known answers recorded one at a
time before a model's first point (about 0.5 s a photo for the detector on these cores)."""


@pytest.fixture(scope="module")
def text_photos(photos_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("text_photos")
    for name in TEXT_PHOTOS:
        (out / name).write_bytes((photos_dir / name).read_bytes())
    return out


def test_the_locust_user_asks_a_detector_for_its_boxes(server, text_photos, tmp_path):
    run = locust("-u", 2, "-r", 2, "-t", "6s", "--host", server.grpc_url, "--protocol", "grpc",
                 "--ensemble", "detect_dali", "--images", text_photos, "--csv", tmp_path / "run", timeout=180)
    assert run.returncode == 0, run.stderr
    [row] = [r for r in read_csv(tmp_path / "run_stats.csv") if r["Name"] == "detect_dali"]
    assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0
    assert float(row["Average Content Size"]) > 0


def test_the_sweep_compares_cpu_and_gpu_decode_of_the_detector(server, text_photos, tmp_path):
    run = sweep(*against(server), "--model", "detect_dali", "--model", "detect_opencv", "--clients", 1,
                "--warmup", "1", "--duration", "4", "--images", text_photos, "--report", tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    points = {(p["protocol"], p["ensemble"]): p for p in results["points"]}
    assert set(points) == {(protocol, model) for protocol in ("grpc", "http") for model in ("detect_dali", "detect_opencv")}
    for point in points.values():
        assert point["stats"]["requests"] > 0 and point["stats"]["failed_photos"] == 0 and not point["stats"]["errors"]
        assert point["stats"]["verified"] == point["stats"]["requests"]  # boxes judged by the detection rule
        models = {b["model"] for b in point["breakdown"]}
        assert {"detector", "detect_postprocess", point["ensemble"]} <= models
    assert "detect_dali vs detect_opencv QPS" in (tmp_path / "comparison.md").read_text()


def test_a_detectors_answer_is_checked_for_one_quad_per_score():
    from harness.task import get_task
    from loadtest.responses import DETECTION_RESULTS, RequestFailed, check_detections

    assert DETECTION_RESULTS == get_task("detection").repository.results
    check_detections(np.zeros((1, 3, 4, 2), np.float32), np.zeros((1, 3), np.float32))
    check_detections(np.zeros((1, 0, 4, 2), np.float32), np.zeros((1, 0), np.float32))  # no text, no boxes
    for boxes, scores in ((np.zeros((1, 3, 4, 2)), np.zeros((1, 2))), (np.zeros((1, 3, 4)), np.zeros((1, 3))),
                          (None, np.zeros((1, 3)))):
        with pytest.raises(RequestFailed, match="bad response"):
            check_detections(boxes, scores)


def test_harness_loadtest_takes_the_detectors(server, text_photos, tmp_path):
    run = subprocess.run([sys.executable, "-m", "harness", "loadtest", *against(server), "--model", "detect_opencv",
                          "--protocols", "http", "--clients", "1", "--warmup", "0.5", "--duration", "20",
                          "--requests", "4", "--images", str(text_photos), "--report", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    [point] = json.loads((tmp_path / "results.json").read_text())["points"]
    assert point["ensemble"] == "detect_opencv" and point["stats"]["requests"] >= 4
