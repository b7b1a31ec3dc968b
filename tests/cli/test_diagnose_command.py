"""`harness diagnose` as a user runs it (a subprocess, real server, real photos)."""

import json
import threading
import time
import urllib.request
from pathlib import Path

from harness.server import TritonServer, free_port
from harness.spec import load_spec
from tests.commands import harness
from tests.conftest import DALI_CHECK_MODELS, copy_photos

SAMPLE = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "imagenet-sample"
NEAR_TIE = "n03047690_clog.JPEG"
"""Its reference top-2 classes are 0.04 logits apart: the aligned deployment flips it (issue 14)."""
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "orange.jpg", "fruits.jpg", "messi5.jpg", "grace_hopper.jpg")


def planted(repository, name):
    return repository.parent / "specs" / "planted" / f"{name}.toml"


def bomb(data: bytes, size: int = 65500) -> bytes:
    """The JPEG with its frame header (SOF) declaring ``size`` x ``size`` pixels."""
    out = bytearray(data)
    k = next(k for k in (out.find(b"\xff\xc0"), out.find(b"\xff\xc2")) if k >= 0)
    out[k + 5:k + 9] = size.to_bytes(2, "big") * 2
    return bytes(out)


def test_diagnose_writes_its_report_and_names_the_fix(server, photos_dir, repository, tmp_path):
    images = copy_photos(photos_dir, PHOTOS[:3], tmp_path / "images")
    result = harness("diagnose", images, "--spec", planted(repository, "channel_order"), "--url", server.grpc_url,
                     "--report", tmp_path / "r", "--reference-model", "onnx")
    assert result.returncode == 1, result.stderr  # check's rule: the deployment diverges, explained or not
    assert "**channel order RGB** (channel order) explains it" in result.stdout
    diagnosis = json.loads((tmp_path / "r" / "diagnosis.json").read_text())
    assert diagnosis["first_divergent_stage"] == "input" and diagnosis["explained_by"] == "channel order RGB"
    top = diagnosis["hypotheses"][0]
    assert top["diverged_before"] == 3 and top["diverged_after"] == 0
    assert [c["cause"] for c in diagnosis["causes"]] == ["channel order RGB"]
    assert (tmp_path / "r" / "diagnosis.md").read_text().startswith("# Diagnosis")
    # A training callable is diagnosed (fingerprinted first); one that is not there is a one-line error.
    custom = harness("diagnose", images, "--url", server.grpc_url, "--reference", "x.py:fn")
    assert custom.returncode == 2 and "reference 'x.py:fn': x.py not found" in " ".join(custom.stderr.split())


def test_three_causes_in_one_run_and_the_written_spec_passes_check(server, photos_dir, repository, tmp_path):
    images = copy_photos(photos_dir, PHOTOS, tmp_path / "images")
    spec = planted(repository, "antialias+channel_order+normalization_scale")
    before = harness("check", images, "--spec", spec, "--url", server.grpc_url, "--report", tmp_path / "c0",
                     "--reference-model", "onnx")
    assert before.returncode == 1, before.stderr
    written = tmp_path / "fixed" / "spec.toml"
    result = harness("diagnose", images, "--spec", spec, "--url", server.grpc_url, "--report", tmp_path / "r",
                     "--reference-model", "onnx", "--write-spec", written)
    assert result.returncode == 1, result.stderr
    diagnosis = json.loads((tmp_path / "r" / "diagnosis.json").read_text())
    assert {c["culprit"] for c in diagnosis["causes"]} == {"resize antialias", "channel order", "normalization scale"}
    costs = [(c["cost"]["top1_flips"], c["cost"]["output_error"]) for c in diagnosis["causes"]]
    assert costs == sorted(costs, reverse=True) and diagnosis["remaining_divergence"] is None
    assert len(diagnosis["rounds"]) >= 3 and diagnosis["written_spec"] == str(written)
    change = diagnosis["combined_change"]["reference"]  # the combined change, in spec terms
    assert (change["input"], change["normalize"], change["resize"]) == (
        {"channel_order": "RGB"}, {"pixel_range": 255.0}, {"antialias": False})
    markdown = (tmp_path / "r" / "diagnosis.md").read_text()
    assert "## Causes, by what each costs in predictions" in markdown and "## Round 3" in markdown

    # The written spec changes only [reference], by extending the one diagnosed.
    assert 'extends = "' in written.read_text()
    fixed = load_spec(written)
    assert fixed.preprocess == load_spec(spec).preprocess
    assert (fixed.reference.preprocess.input.channel_order, fixed.reference.preprocess.normalize.pixel_range,
            fixed.reference.preprocess.resize.antialias) == ("RGB", 255.0, False)
    after = harness("check", images, "--spec", written, "--url", server.grpc_url, "--report", tmp_path / "c1",
                    "--reference-model", "onnx")
    assert after.returncode == 0, after.stdout + after.stderr
    assert "No stage diverged" in after.stdout


def test_hostile_files_are_listed_without_a_traceback(server, photos_dir, repository, tmp_path):
    images = copy_photos(photos_dir, PHOTOS[:3], tmp_path / "images")
    baboon = (photos_dir / "baboon.jpg").read_bytes()
    (images / "bomb.jpg").write_bytes(bomb(baboon))
    (images / "empty.jpg").write_bytes(b"")
    (images / "notes.jpg").write_text("not a photo\n")
    result = harness("diagnose", images, "--spec", planted(repository, "channel_order"), "--url", server.grpc_url,
                     "--report", tmp_path / "r", "--reference-model", "onnx")
    assert "Traceback" not in result.stderr, result.stderr
    diagnosis = json.loads((tmp_path / "r" / "diagnosis.json").read_text())
    failed = {f["image"]: f for f in diagnosis["failed"]}
    assert set(failed) == {"bomb.jpg", "empty.jpg", "notes.jpg"}
    assert all(f["outcome"] == "failed" and f["reason"] for f in failed.values())  # neither side reads them
    assert "too large" in failed["bomb.jpg"]["reason"]
    assert result.returncode == 1 and diagnosis["explained_by"] == "channel order RGB"
    assert "3 images failed on both sides" in result.stdout

    only_hostile = tmp_path / "hostile"
    only_hostile.mkdir()
    (only_hostile / "bomb.jpg").write_bytes(bomb(baboon))
    (only_hostile / "empty.jpg").write_bytes(b"")
    nothing = harness("diagnose", only_hostile, "--url", server.grpc_url, "--report", tmp_path / "r2",
                      "--reference-model", "onnx")
    assert nothing.returncode == 2 and "no image could be compared" in " ".join(nothing.stderr.split())
    assert "Traceback" not in nothing.stderr


def requests_served(metrics_url: str) -> float:
    text = urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("nv_inference_request_success{"))


def test_a_server_that_stops_mid_read_exits_2_without_a_traceback(cpu_repository, photos_dir, repository, tmp_path):
    many = tmp_path / "images"
    many.mkdir()
    for k in range(300):  # enough requests that the server stops in the middle of them
        (many / f"{k:03d}.jpg").write_bytes((photos_dir / PHOTOS[k % len(PHOTOS)]).read_bytes())
    ports = dict(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    server = TritonServer(cpu_repository, log_file=tmp_path / "t.log", models=DALI_CHECK_MODELS, **ports).start()

    def stop_once_busy():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and requests_served(f"127.0.0.1:{ports['metrics_port']}") < 20:
            time.sleep(0.2)
        server.stop()

    stopper = threading.Thread(target=stop_once_busy)
    try:
        stopper.start()
        result = harness("diagnose", many, "--spec", planted(repository, "channel_order"), "--url", server.grpc_url,
                         "--report", tmp_path / "r", "--reference-model", "onnx")
    finally:
        stopper.join()
        server.stop()
    assert result.returncode == 2, result.stdout + result.stderr
    stderr = " ".join(result.stderr.split())  # the console wraps long lines
    assert "stopped answering at image" in stderr and server.grpc_url in stderr
    assert "Traceback" not in result.stderr


def test_a_near_tie_alone_is_nothing_diverged(server, photos_dir, tmp_path):
    images = copy_photos(photos_dir, PHOTOS[:2], tmp_path / "images")
    (images / NEAR_TIE).write_bytes((SAMPLE / "images" / NEAR_TIE).read_bytes())
    result = harness("diagnose", images, "--url", server.grpc_url, "--report", tmp_path / "r")
    assert result.returncode == 0, result.stdout + result.stderr
    diagnosis = json.loads((tmp_path / "r" / "diagnosis.json").read_text())
    assert diagnosis["first_divergent_stage"] is None and diagnosis["baseline"]["top1_ties"] == 1
    assert "1 top-1 change is a near tie" in result.stdout and not diagnosis["rounds"]
    # Without a tie margin the same flip is a divergence at topk, and the search takes it on:
    # the one-level rounding of cv2's resize against DALI's explains it.
    strict = harness("diagnose", images, "--url", server.grpc_url, "--report", tmp_path / "r0", "--tie-margin", "0")
    diagnosis = json.loads((tmp_path / "r0" / "diagnosis.json").read_text())
    assert diagnosis["first_divergent_stage"] == "topk" and diagnosis["baseline"]["top1_ties"] == 0
    assert strict.returncode == 1 and diagnosis["explained_by"] == "resize with dali", strict.stdout
