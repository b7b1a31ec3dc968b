"""A foreign detection deployment through ``--model`` (examples/foreign_detection: BYTES input
``image_bytes``, its own OpenCV letterbox answering a ``letterbox`` record beside the tensor,
the PP-OCRv6 detector in ONNX Runtime, a postprocessing step with two inputs answering
``boxes [-1, 4]`` and ``scores [-1]``, none of this project's names), served for real by the
embedded tritonserver at a 320x320 letterbox, on words rendered onto real photos and one
photo without text: aligned it passes over gRPC and HTTP with every box matched; planted
differences fail at their stage (the padding in the corner: ``input``, and diagnose names it;
boxes mapped back without the padding: ``postprocess``, also run alone on the reference's map);
a deployment answering only its map is postprocessed on both sides by ``--postprocess``; bad
answers (boxes outside the image, NaN scores, thousands of boxes) are divergences with their
reason, not crashes; an unbatched deployment and a single model answering EfficientNMS's
outputs check alike; accuracy scores the deployment on the rendered words' labels. Discovery
of the conventions without a server is tested at the end."""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest

from harness.deployment.discovery import ModelInfo, TensorInfo, task_output
from harness.detection.data import generate
from harness.detection.detector import model_path
from harness.task import TASKS, claimed_by
from tests.commands import harness
from tests.detection.conftest import CLEAN_PHOTOS
from tests.foreign_detection import ENSEMBLE, NMS_MODEL, POSTPROCESS, Variant, serve_foreign_detection

SPEC = Path(__file__).parent / "foreign_320.toml"
NO_TEXT = CLEAN_PHOTOS[3]
"""A photo in which neither side finds anything: zero boxes on both sides is agreement."""
VARIANTS = {
    "find_text_top_left": Variant({"letterbox_image": {"pad_position": "top_left"}}),
    "find_text_unpadded": Variant({"boxes_from_map": {"unpad": "false"}}),
    "find_text_map": Variant(map_only=True),
    "find_text_outside": Variant({"boxes_from_map": {"fault": "outside"}}),
    "find_text_nan": Variant({"boxes_from_map": {"fault": "nan"}}),
    "find_text_many": Variant({"boxes_from_map": {"fault": "many"}}),
    "find_text_unbatched": Variant(batched=False),
    "find_text_unclip": Variant({"boxes_from_map": {"unclip_ratio": "2.0"}}),
    "find_text_box_thresh": Variant({"boxes_from_map": {"box_thresh": "0.7"}}),
}
ONE_LEVEL = Path(__file__).parent / "foreign_320_dali.toml"
"""The same training replayed with DALI's resize: the deployment's maps differ from it by noise."""


@pytest.fixture(scope="module")
def photos(sample, tmp_path_factory):
    """Words rendered onto three real photos (seed 0), and a photo without text."""
    out = tmp_path_factory.mktemp("foreign_words")
    generate([sample / name for name in CLEAN_PHOTOS[:3]], out, 3, seed=0)
    shutil.copy(sample / NO_TEXT, out / "images" / NO_TEXT)
    return out / "images"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_foreign_detection(tmp_path_factory.mktemp("foreign_detection") / "repository", VARIANTS,
                                 nms=True) as triton:
        yield triton


def check(server, photos, report, model, *options, protocol="grpc", spec=SPEC):
    result = harness("check", photos, "--model", model, "--url", server.url(protocol), "--protocol", protocol,
                     "--spec", spec, "--reference-model", model_path(), "--report", report, *options, timeout=600)
    found = json.loads((report / "report.json").read_text()) if (report / "report.json").exists() else None
    return result, found


def stages_of(report) -> dict:
    return {s["name"]: s for s in report["stages"]}


def rows_of(report_dir) -> dict:
    with (report_dir / "per_image.csv").open() as f:
        return {row["image"]: row for row in csv.DictReader(f)}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_aligned_deployment_passes_with_every_box_matched(server, photos, tmp_path, protocol):
    result, report = check(server, photos, tmp_path, ENSEMBLE, protocol=protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["task"] == "detection"  # discovery picked it: the outputs hold boxes and scores
    stages = stages_of(report)
    assert list(stages) == ["input", "output", "postprocess"]
    assert all(s["verdict"] in ("equal", "close") for s in stages.values())
    figures = report["task_figures"]
    assert figures["reference_boxes"] >= 6 and figures["matched"] == figures["reference_boxes"] == figures["deployed_boxes"]
    assert figures["missed"] == figures["extra"] == 0
    deployment = report["deployed"]["deployment"]
    assert deployment["image_input"] == "image_bytes STRING [1] (bytes, batched)"
    assert [(m["step"], m["tensor"], m["stage"]) for m in deployment["mapping"]] == [
        ("letterbox_image", "letterbox", None), ("letterbox_image", "pixels", "input"),
        ("text_detector", "probability", "output"), ("boxes_from_map", "boxes", "postprocess"),
        ("boxes_from_map", "scores", "postprocess")]
    assert deployment["replay"]["trusted"] and deployment["replay"]["images"] == 4
    # the raw map is inside the ensemble: read from the replay, and said so
    assert "text_detector.probability -> output" in result.stdout and "read from the step-by-step replay" in result.stdout
    # the detector alone on the reference's input, the postprocessing alone on the reference's map (its
    # letterbox record as the deployment made it): both agree
    assert stages["output"]["isolated_verdict"] in ("equal", "close")
    assert stages["postprocess"]["isolated_verdict"] in ("equal", "close")
    assert stages["postprocess"]["isolated"]["worst_corner_px"]["worst"] <= 2
    row = rows_of(tmp_path)[NO_TEXT]
    assert (row["reference_boxes"], row["deployed_boxes"], row["postprocess_verdict"]) == ("0", "0", "equal")


def test_padding_in_the_corner_fails_at_the_input_and_diagnose_names_it(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path / "check", "find_text_top_left")
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "input"
    assert stages_of(report)["input"]["verdict"] == "diverged"
    diagnosis = harness("diagnose", photos, "--task", "detection", "--model", "find_text_top_left",
                        "--url", server.grpc_url, "--spec", SPEC, "--reference-model", model_path(),
                        "--report", tmp_path / "diagnose", timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert [c["culprit"] for c in found["causes"]] == ["letterbox pad position"], diagnosis.stdout + diagnosis.stderr


def test_boxes_mapped_back_without_the_padding_diverge_at_postprocess_alone(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path, "find_text_unpadded")
    assert result.returncode == 1, result.stdout + result.stderr
    stages = stages_of(report)
    assert stages["input"]["verdict"] in ("equal", "close") and stages["output"]["verdict"] in ("equal", "close")
    assert report["first_divergent_stage"] == "postprocess" and stages["postprocess"]["verdict"] == "diverged"
    # the step alone, fed the reference's map, maps the boxes back just as wrongly
    assert stages["postprocess"]["isolated_verdict"] == "diverged"
    assert report["task_figures"]["matched"] == 0


def test_the_aligned_deployment_beside_a_one_level_resize_difference_passes(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path, ENSEMBLE, spec=ONE_LEVEL)
    assert result.returncode == 0, result.stdout + result.stderr
    post = stages_of(report)["postprocess"]
    assert post["verdict"] in ("equal", "close", "tie") and post["isolated_verdict"] in ("equal", "close")
    assert stages_of(report)["output"]["verdict"] == "close"  # the maps do differ: the resizes are one level apart


@pytest.mark.parametrize("model, key, value, culprit", [("find_text_unclip", "unclip_ratio", 2.0, "DB unclip ratio"),
                                                        ("find_text_box_thresh", "box_thresh", 0.7,
                                                         "DB box score threshold")])
def test_a_postprocessing_difference_beside_a_one_level_resize_difference_fails_at_postprocess(
        server, photos, tmp_path, model, key, value, culprit):
    """The maps' noise is no excuse: the deployment's postprocessing run alone on the reference's
    map diverges, so no changed image is a tie (before issue 34 most were), and diagnose names
    the parameter; its corrected spec passes."""
    result, report = check(server, photos, tmp_path / "check", model, spec=ONE_LEVEL)
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "postprocess"
    post = stages_of(report)["postprocess"]
    assert post["verdict"] == "diverged" and post["isolated_verdict"] == "diverged"
    changed = [row for row in rows_of(tmp_path / "check").values() if row["postprocess_verdict"] not in ("equal", "close")]
    assert changed and all(row["postprocess_verdict"] == "diverged" for row in changed), changed
    # each changed image says why its change is not a tie
    images = [json.loads(line) for line in (tmp_path / "check" / "images.jsonl").read_text().splitlines()]
    reasons = {s["metrics"].get("unexplained") for i in images for s in i["stages"] if s["stage"] == "postprocess"}
    assert any(r and "run alone on the reference's output" in r for r in reasons), reasons
    # without the isolated run (--no-isolate, as accuracy judges box changes), its mirror: the
    # reference's postprocessing on the deployment's own map does not make its boxes
    result, report = check(server, photos, tmp_path / "no_isolate", model, "--no-isolate", spec=ONE_LEVEL)
    assert result.returncode == 1, result.stdout + result.stderr
    changed = [row for row in rows_of(tmp_path / "no_isolate").values() if row["postprocess_verdict"] not in
               ("equal", "close")]
    assert changed and all(row["postprocess_verdict"] == "diverged" for row in changed), changed
    diagnosis = harness("diagnose", photos, "--task", "detection", "--model", model, "--url", server.grpc_url,
                        "--spec", ONE_LEVEL, "--reference-model", model_path(), "--report", tmp_path / "diagnose",
                        "--write-spec", tmp_path / "fixed.toml", timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert [c["culprit"] for c in found["causes"]] == [culprit], diagnosis.stdout + diagnosis.stderr
    assert f"postprocess.{key}" in diagnosis.stdout
    from harness.spec import load_spec

    assert load_spec(tmp_path / "fixed.toml").reference.postprocess[key] == value
    fixed, _ = check(server, photos, tmp_path / "fixed", model, spec=tmp_path / "fixed.toml")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_accuracy_scores_the_foreign_deployment_on_the_labeled_photos(server, photos, tmp_path):
    result = harness("accuracy", photos.parent / "labels.json", "--task", "detection", "--model", ENSEMBLE,
                     "--url", server.grpc_url, "--spec", SPEC, "--reference-model", model_path(), "--report", tmp_path,
                     timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    reference, deployed = json.loads((tmp_path / "accuracy.json").read_text())["effect"]["paths"]
    assert (reference["path"], deployed["path"]) == ("reference", ENSEMBLE)
    assert deployed["f1"] == reference["f1"] > 0.5 and not deployed["box_changes"]
    assert "COCO JSON" in (tmp_path / "accuracy.md").read_text()


def test_a_deployment_answering_its_map_is_postprocessed_on_both_sides(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path, "find_text_map", "--task", "detection",
                           "--postprocess", f"{POSTPROCESS}:word_boxes")
    assert result.returncode == 0, result.stdout + result.stderr
    stages = stages_of(report)
    assert list(stages) == ["input", "output", "postprocess"]
    assert stages["postprocess"]["verdict"] in ("equal", "close")
    figures = report["task_figures"]
    assert figures["reference_boxes"] >= 6 and figures["matched"] == figures["reference_boxes"] == figures["deployed_boxes"]
    assert "text_map" in result.stdout and "boxes made of it here" in result.stdout


@pytest.mark.parametrize("model, problem", [("find_text_outside", "reach outside"), ("find_text_nan", "not finite")])
def test_boxes_outside_the_image_and_nan_scores_are_divergences_with_their_reason(server, photos, tmp_path, model,
                                                                                   problem):
    result, report = check(server, photos, tmp_path, model, "--no-isolate")
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["compared"] == 4 and stages_of(report)["postprocess"]["verdict"] == "diverged"
    problems = [line for e in report["events"] for line in e["problems"]]
    assert problems and all(problem in line for line in problems), problems
    assert problem in (tmp_path / "report.md").read_text()


def test_thousands_of_boxes_are_checked_in_bounded_time(server, photos, tmp_path):
    start = time.perf_counter()
    result, report = check(server, photos, tmp_path, "find_text_many", "--no-isolate")
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.perf_counter() - start < 120
    figures = report["task_figures"]
    assert figures["deployed_boxes"] >= 4 * 3000 and figures["extra"] >= 4 * 3000
    assert figures["matched"] == figures["reference_boxes"]  # the real words are still found among them


def test_an_unbatched_deployment_checks_alike(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path, "find_text_unbatched", protocol="http")
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["deployed"]["deployment"]["image_input"] == "image_bytes STRING [1] (bytes, one image per request)"
    assert report["task_figures"]["missed"] == report["task_figures"]["extra"] == 0


def test_a_single_model_answering_efficientnms_outputs(server, photos, tmp_path):
    result, report = check(server, photos, tmp_path, NMS_MODEL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["task"] == "detection"  # its det_scores [100] would otherwise read as class scores
    assert list(stages_of(report)) == ["postprocess"]
    figures = report["task_figures"]
    assert figures["reference_boxes"] >= 6 and figures["matched"] == figures["reference_boxes"] == figures["deployed_boxes"]
    assert "count num_dets" in result.stdout and "only the boxes are compared" in result.stdout


# -- discovery of the conventions, without a server ---------------------------------------------

def model(*outputs, name="m"):
    return ModelInfo(name, "python", 8, (TensorInfo("image", "TYPE_STRING", (1,)),),
                     tuple(TensorInfo(n, t, d) for n, t, d in outputs))


FP32, INT32 = "TYPE_FP32", "TYPE_INT32"


def test_discovery_reads_each_convention_by_name_and_finds_the_raw_output():
    nms = model(("num_dets", INT32, (1,)), ("det_boxes", FP32, (100, 4)), ("det_scores", FP32, (100,)),
                ("det_classes", INT32, (100,)))
    task, out, why = task_output(nms, tasks=TASKS)
    assert (task.name, out) == ("detection", None) and "count num_dets" in why
    assert task.result_outputs(nms).names == ("det_boxes", "det_scores", "det_classes", "num_dets")
    # boxes and scores, and the map beside them: the map is the raw output, whatever the order
    both = model(("scores", FP32, (-1,)), ("heatmap", FP32, (1, -1, -1)), ("boxes", FP32, (-1, 4)))
    task, out, _ = task_output(both, tasks=TASKS)
    assert task.name == "detection" and out.name == "heatmap"
    assert task.result_outputs(both).layout == "xyxy"
    quads = model(("polys", FP32, (-1, 4, 2)), ("confidence", FP32, (-1,)))
    assert task_output(quads, tasks=TASKS)[0].result_outputs(quads).layout == "quads"
    # a map alone is detection only when asked; then it is the raw output
    raw = model(("prob_map", FP32, (1, -1, -1)))
    assert claimed_by(raw)[0].name == "classification"
    assert task_output(raw, "detection", tasks=TASKS)[1].name == "prob_map"
