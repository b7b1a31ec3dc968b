"""Background removal deployed as users deploy rembg (tests/own/seg_ocr.py: none of this
project's names), checked for real on real photos: an ensemble answering rembg's own answer,
the alpha matte alone (uint8 at the photo's size), its steps' tensors NCHW with a batch of one;
the same answering its matte float [1, 1, H, W] (issue 59); and one model answering a float
matte at the model's 320x320. Aligned, each passes; with a hand port's preprocessing planted
(OpenCV's linear resize, ``/ 255``), each fails at the first stage it shows: the ensemble at
its model input, the single model at its matte (on the dimmed photo, whose brightest value 150
makes ``/ 255`` and rembg's division by the maximum differ)."""

from __future__ import annotations

import json

import pytest

from tests.commands import harness
from tests.conftest import copy_photos
from tests.own.seg_ocr import MATTE_ENSEMBLE, MATTE_MODEL, NCHW_MATTE_ENSEMBLE, PLANTED, SEGMENTATION_SPEC
from tests.segmentation.conftest import PHOTOS

pytestmark = pytest.mark.server


def check(server, photos, report, model, protocol="grpc"):
    result = harness("check", photos, "--task", "segmentation", "--model", model, "--url", server.url(protocol),
                     "--protocol", protocol, "--spec", SEGMENTATION_SPEC, "--reference-model",
                     SEGMENTATION_SPEC.parent / "segmenter" / "model.onnx", "--report", report)
    return result, json.loads((report / "report.json").read_text())


def stages(report) -> dict:
    return {s["name"]: s for s in report["stages"]}


def test_an_ensemble_answering_rembgs_matte_alone_is_read_step_by_step_and_passes(own_seg_ocr, segmentation_photos,
                                                                                  tmp_path):
    result, report = check(own_seg_ocr, segmentation_photos, tmp_path, MATTE_ENSEMBLE)
    assert result.returncode == 0, result.stdout + result.stderr
    found = result.stdout
    assert "a matte alpha alone" in found
    assert "matte_prep.tensor (a batch of one) -> input" in found and "u2netp.1959 (a batch of one) -> output" in found
    by_name = stages(report)
    assert list(by_name) == ["input", "output", "postprocess"]
    assert all(s["verdict"] in ("equal", "close") for s in report["stages"])
    # the segmenter and rembg's postprocessing step each run alone on the reference's stage: equal
    assert by_name["output"]["isolated_verdict"] in ("equal", "close")
    assert by_name["postprocess"]["isolated_verdict"] in ("equal", "close")
    f = report["task_figures"]
    assert f["images"] == 3 and f["mean_iou"] == 1.0 and f["flipped"] == 0


def test_a_matte_answered_nchw_with_a_batch_of_one_is_the_result_not_the_raw_map(own_seg_ocr, segmentation_photos,
                                                                                  tmp_path):
    """Issue 59: three steps without batching, the last answering the matte float32 [1, 1, H, W]
    (the map's layout kept): it was read as the raw map, so ``output`` diverged with every image
    "with another shape" while the masks were the reference's (IoU 1); it is the matte alone. Two photos."""
    photos = copy_photos(segmentation_photos, PHOTOS, tmp_path / "photos")
    result, report = check(own_seg_ocr, photos, tmp_path / "report", NCHW_MATTE_ENSEMBLE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "a matte alpha alone" in result.stdout and "u2netp.1959 (a batch of one) -> output" in result.stdout
    assert "rembg_post_nchw.alpha (a batch of one) -> postprocess" in result.stdout
    by_name = stages(report)
    assert list(by_name) == ["input", "output", "postprocess"]
    assert by_name["output"]["verdict"] in ("equal", "close") and "shape_mismatch" not in by_name["output"]["metrics"]
    assert report["task_figures"]["mean_iou"] == 1.0 and report["task_figures"]["flipped"] == 0


def test_the_ensemble_with_a_hand_ports_preprocessing_fails_at_its_model_input(own_seg_ocr, segmentation_photos,
                                                                              tmp_path):
    """The first stage the ensemble shows is its step's model input; the segmenter and the
    postprocessing step, each alone on the reference's stage, add nothing (they inherit it)."""
    result, report = check(own_seg_ocr, segmentation_photos, tmp_path, MATTE_ENSEMBLE + PLANTED)
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "input"
    by_name = stages(report)
    assert by_name["input"]["verdict"] == "diverged"
    assert by_name["output"]["isolated_verdict"] in ("equal", "close")
    assert by_name["postprocess"]["isolated_verdict"] in ("equal", "close")
    assert "dim_angora.jpg" in [e["image"] for e in report["events"]]


def test_a_float_matte_at_the_models_size_is_brought_to_the_photos_and_passes(own_seg_ocr, segmentation_photos,
                                                                             tmp_path):
    """Upsampled as the spec's saliency upsamples its matte (LANCZOS), thresholded at 0.5."""
    result, report = check(own_seg_ocr, segmentation_photos, tmp_path, MATTE_MODEL, protocol="http")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "a matte matte alone" in result.stdout
    assert list(stages(report)) == ["postprocess"] and stages(report)["postprocess"]["verdict"] in ("equal", "close")
    assert report["task_figures"]["mean_iou"] > 0.99 and report["task_figures"]["mean_matte_mae"] < 0.005


def test_the_float_matte_with_a_hand_ports_preprocessing_fails_at_its_matte(own_seg_ocr, segmentation_photos,
                                                                           tmp_path):
    result, report = check(own_seg_ocr, segmentation_photos, tmp_path, MATTE_MODEL + PLANTED, protocol="http")
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "postprocess"
    assert "dim_angora.jpg" in [e["image"] for e in report["events"]]
