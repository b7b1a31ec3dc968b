"""`harness check / diagnose / accuracy --task detection` against this repository's text detector,
served for real (detect_dali, detect_opencv: the cpu profile), on words rendered onto real photos.

The server serves ``specs/detection/small.toml`` (the detector at a CI-sized input); the planted
specs of ``specs/detection/planted/`` change only what training did ([reference]), so one server
serves them all. The letterbox plant needs a server of its own (the deployment letterboxes).
"""

from __future__ import annotations

import csv
import json

import pytest

from harness.paths import PROJECT_ROOT
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from tests.commands import harness
from tests.conftest import pipeline_models

SPECS = PROJECT_ROOT / "specs" / "detection"
SMALL = SPECS / "small.toml"


def serve(repository, spec, directory):
    return TritonServer(build_cpu_profile(repository, directory / "repository", {"detection.toml": spec}),
                        http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                        models=pipeline_models("detection"))


@pytest.fixture(scope="module")
def detection_server(repository, tmp_path_factory):
    triton = serve(repository, SMALL, tmp_path_factory.mktemp("detection"))
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="module")
def words(labeled):
    """The labeled photos' folder (the words rendered onto real photos: tests/detection/conftest.py)."""
    return labeled.parent / "images"


def check(server, images, report, *args, protocol="grpc", html=False):
    result = harness("check", images, "--task", "detection", "--url", server.url(protocol), "--protocol", protocol,
                     "--report", report, *args, html=html)
    return result, (json.loads((report / "report.json").read_text()) if (report / "report.json").exists() else None)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_aligned_detector_passes_with_every_box_matched(detection_server, words, tmp_path, protocol):
    result, report = check(detection_server, words, tmp_path, "--spec", SMALL, protocol=protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["decode", "resize", "crop", "input", "output", "postprocess"]
    assert stages["postprocess"]["verdict"] in ("equal", "close") and stages["output"]["verdict"] in ("equal", "close")
    figures = report["task_figures"]
    assert figures["reference_boxes"] > 10 and figures["matched"] == figures["reference_boxes"] == figures["deployed_boxes"]
    assert figures["missed"] == figures["extra"] == 0 and figures["mean_iou"] > 0.9
    # the postprocessing step run alone on the reference's map makes the reference's boxes
    assert stages["postprocess"]["isolated"]["worst_corner_px"]["worst"] <= 1
    with (tmp_path / "per_image.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"postprocess_verdict", "reference_boxes", "matched", "missed", "extra"} <= set(rows[0])
    assert sum(int(r["matched"]) for r in rows) == figures["matched"]


def test_the_opencv_twin_checks_alike(detection_server, words, tmp_path):
    result, report = check(detection_server, words, tmp_path, "--spec", SMALL, "--pipeline", "opencv", "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "detect_opencv" in result.stdout
    assert {s["name"]: s["verdict"] for s in report["stages"]}["decode"] == "equal"


PLANTED = [
    # (spec, first divergent stage, the culprit diagnose names)
    ("limit_type.toml", "resize", "limit type"),
    ("limit_length.toml", "resize", "limit side length"),
    ("channel_order.toml", "input", "channel order"),
    ("unclip_ratio.toml", "postprocess", "DB unclip ratio"),  # the result step's own (issue 34)
]


@pytest.mark.parametrize("planted, stage, culprit", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_cause_fails_at_its_stage_and_diagnose_names_it(detection_server, words, tmp_path, planted, stage,
                                                                   culprit):
    spec = SPECS / "planted" / planted
    result, report = check(detection_server, words, tmp_path / "check", "--spec", spec, "--no-isolate")
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == stage
    diagnosis = harness("diagnose", words, "--task", "detection", "--url", detection_server.grpc_url, "--spec", spec,
                        "--report", tmp_path / "diagnose", timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    causes = [c["culprit"] for c in found["causes"]]
    assert causes == [culprit], diagnosis.stdout + diagnosis.stderr


def test_a_training_resize_unlike_the_deployments_is_compared_through_the_ensembles_steps(detection_server, words,
                                                                                         tmp_path):
    """Training enlarges the shorter side to 320, the deployment shrinks the longer to it; read
    as any ensemble (--model detect_dali, replayed step by step), on photos larger and one
    smaller than the limit. Each side's map is postprocessed with its own geometry: the boxes
    are compared in source pixels (exit 1, box changes counted), never "nothing compared"
    (before issue 34 the box step alone got the reference's map with the deployment's GEOMETRY,
    and every image failed)."""
    import cv2

    images = tmp_path / "images"
    images.mkdir()
    for photo in sorted(words.iterdir())[:3]:
        (images / photo.name).write_bytes(photo.read_bytes())
    first = cv2.imread(str(sorted(words.iterdir())[0]))
    cv2.imwrite(str(images / "small.jpg"), cv2.resize(first, (200, 150), interpolation=cv2.INTER_AREA))
    result = harness("check", images, "--model", "detect_dali", "--url", detection_server.grpc_url,
                     "--spec", SPECS / "planted" / "limit_type.toml", "--report", tmp_path / "check",
                     "--format", "json,csv", timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    assert report["compared"] == 4, result.stdout
    stages = {s["name"]: s for s in report["stages"]}
    # the maps have other sizes: said so, not a failed image
    assert report["first_divergent_stage"] == "output" and stages["output"]["verdict"] == "diverged"
    assert stages["output"]["metrics"]["shape_mismatch"]["worst"] == 1
    figures = report["task_figures"]
    assert figures["images"] == 4 and figures["reference_boxes"] > 5 and figures["matched"] > 0
    assert report["events"], "another resize moves some word's boxes"
    # the box step alone on the reference's map, fed the reference's geometry, makes the reference's boxes
    assert stages["postprocess"]["isolated_verdict"] in ("equal", "close")
    assert "the reference's geometry as GEOMETRY" in result.stdout


def test_two_planted_causes_are_named_in_one_diagnosis(detection_server, words, tmp_path):
    spec = SPECS / "planted" / "limit_type+channel_order.toml"
    diagnosis = harness("diagnose", words, "--task", "detection", "--url", detection_server.grpc_url, "--spec", spec,
                        "--report", tmp_path, timeout=900)
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    causes = [c["culprit"] for c in found["causes"]]
    assert sorted(causes) == ["channel order", "limit type"], diagnosis.stdout + diagnosis.stderr


@pytest.mark.server  # starts its own tritonserver
def test_padding_in_the_corner_fails_at_the_canvas_and_diagnose_names_it(repository, words, tmp_path):
    spec = SPECS / "letterbox_corner.toml"
    with serve(repository, spec, tmp_path) as triton:
        result, report = check(triton, words, tmp_path / "check", "--spec", spec, html=True)
        assert result.returncode == 1, result.stdout + result.stderr
        stages = {s["name"]: s for s in report["stages"]}
        # the same resized image, placed elsewhere on the canvas: the resize agrees, the canvas does not
        assert stages["resize"]["verdict"] in ("equal", "close") and report["first_divergent_stage"] == "crop"
        html = (tmp_path / "check" / "report.html").read_text()
        assert "class=boxes" in html  # the worst images with both sides' boxes drawn
        harness("diagnose", words, "--task", "detection", "--url", triton.grpc_url, "--spec", spec,
                "--report", tmp_path / "diagnose", timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    causes = [c["culprit"] for c in found["causes"]]
    assert causes == ["letterbox pad position"]


def test_accuracy_on_the_labeled_set_measures_a_planted_cause(detection_server, labeled, tmp_path):
    result = harness("accuracy", labeled, "--task", "detection", "--url", detection_server.grpc_url,
                     "--spec", SPECS / "planted" / "limit_length.toml", "--pipeline", "dali",
                     "--report", tmp_path, timeout=600)
    effect = json.loads((tmp_path / "accuracy.json").read_text())["effect"]
    reference, deployed = effect["paths"]
    assert reference["path"] == "reference" and deployed["path"] == "dali"
    assert reference["labeled"] == deployed["labeled"] > 10
    assert 0.5 < reference["f1"] <= 1 and 0 < deployed["f1"] <= 1
    assert deployed["box_changes"], "480 vs 320 moves some word's boxes"
    assert result.returncode == 1, result.stdout + result.stderr  # a box change beyond the threshold


def test_infer_shows_each_detectors_boxes(detection_server, words):
    result = harness("infer", words, "--task", "detection", "--pipeline", "dali", "--pipeline", "opencv",
                     "--url", detection_server.grpc_url, "--top-k", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "detect_dali" in result.stdout and "detect_opencv" in result.stdout
    assert result.stdout.count(" boxes") >= 2 * len(list(words.iterdir()))  # a count per image and detector
