"""`harness check --task segmentation --model` against a foreign segmentation deployment written
by the tests (tests/segmentation/foreign.py: its own model and tensor names, a two-class argmax
head appended to U²-Net-p's ONNX, its own Python-backend preprocessing), served for real on
real photos: aligned with the spec's argmax, and with the user's ``--postprocess``; planted
(argmax before upsampling in training, BGR in the deployment) it fails at its stage; NaN logits
and a mask of the wrong size are rows saying so, not a crash."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from harness.paths import PROJECT_ROOT
from harness.server import TritonServer, free_port
from tests.commands import harness
from tests.segmentation.conftest import PHOTOS, SAMPLE
from tests.segmentation.foreign import HERE, MODELS, POSTPROCESS, SPEC, add_foreign, head_logits

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def foreign(repository, tmp_path_factory):
    """The foreign models only, on their own server; the two-class ONNX (the reference model)."""
    profile = tmp_path_factory.mktemp("foreign_segmentation") / "repository"
    profile.mkdir()
    onnx_path = add_foreign(profile, repository / "segmenter" / "model.onnx")
    triton = TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=MODELS)
    with triton:
        yield triton, onnx_path
    assert not triton.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Two real photos with a salient animal (the aligned checks)."""
    folder = tmp_path_factory.mktemp("foreign_photos")
    for name in PHOTOS:
        (folder / name).write_bytes((SAMPLE / name).read_bytes())
    return folder


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """One of them (the angora: a large animal, a long boundary), for the plants and the bad answers."""
    folder = tmp_path_factory.mktemp("foreign_photo")
    (folder / PHOTOS[1]).write_bytes((SAMPLE / PHOTOS[1]).read_bytes())
    return folder


def check(foreign, images, report, model, *args, task=("--task", "segmentation")):
    server, onnx_path = foreign
    result = harness("check", images, *task, "--model", model, "--reference-model", onnx_path,
                     "--url", server.grpc_url, "--report", report, *args)
    path = report / "report.json"
    return result, (json.loads(path.read_text()) if path.exists() else None)


def test_the_head_is_the_maps_argmax(repository, tmp_path):
    """The appended head in ONNX Runtime: [0, log-odds] of the segmenter's own map, on a real photo's input
    (rembg's preprocessing, as the foreign model's)."""
    import onnxruntime as ort
    from PIL import Image

    from tests.segmentation.foreign import two_class_onnx

    segmenter = repository / "segmenter" / "model.onnx"
    pixels = np.asarray(Image.open(SAMPLE / PHOTOS[0]).convert("RGB").resize((320, 320), Image.LANCZOS), np.float64)
    pixels = (pixels / pixels.max() - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    x = pixels.astype(np.float32).transpose(2, 0, 1)[None]
    base = ort.InferenceSession(str(segmenter), providers=["CPUExecutionProvider"])
    p = base.run([base.get_outputs()[0].name], {base.get_inputs()[0].name: x})[0]
    head = ort.InferenceSession(str(two_class_onnx(segmenter, tmp_path / "two.onnx")), providers=["CPUExecutionProvider"])
    (logits,) = head.run(["class_logits"], {"pixels": x})
    assert logits.shape == (1, 2, 320, 320)
    np.testing.assert_allclose(logits, head_logits(p), atol=1e-3)
    salient = p[0, 0] > 0.5
    assert 0.005 < salient.mean() < 0.9  # a real photo's bird: both classes present (1% of the map)
    assert ((logits[0, 1] > logits[0, 0]) == salient).mean() > 0.9999


@pytest.mark.parametrize("postprocess", [None, "argmax_at_source"])
def test_the_aligned_foreign_deployment_passes(foreign, photos, tmp_path, postprocess):
    """The spec's argmax (logits upsampled, then the argmax) or the user's own, for both sides. Without
    --task, discovery names the task by the output: C-class logits [2, -1, -1] named as class logits."""
    extra = ("--postprocess", f"{POSTPROCESS}:{postprocess}") if postprocess else ()
    result, report = check(foreign, photos, tmp_path, "cutout", "--spec", SPEC, *extra,
                           task=() if postprocess is None else ("--task", "segmentation"))
    assert result.returncode == 0, result.stdout + result.stderr
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["output", "postprocess"]
    assert stages["output"]["verdict"] in ("equal", "close") and stages["postprocess"]["verdict"] in ("equal", "close")
    figures = report["task_figures"]
    assert figures["images"] == len(PHOTOS) and figures["mean_iou"] > 0.99
    assert report["task"] == "segmentation"
    assert "class_logits" in result.stdout + (tmp_path / "report.md").read_text()


def test_argmax_before_upsampling_in_training_fails_at_postprocess(foreign, photo, tmp_path):
    result, report = check(foreign, photo, tmp_path, "cutout", "--spec", HERE / "argmax_before.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["output"]["verdict"] in ("equal", "close")
    assert stages["postprocess"]["verdict"] == "diverged" and stages["postprocess"]["isolated_verdict"] == "diverged"
    assert report["first_divergent_stage"] == "postprocess"


def test_a_deployment_feeding_bgr_fails_at_its_output(foreign, photo, tmp_path):
    result, report = check(foreign, photo, tmp_path, "cutout_bgr", "--spec", SPEC)
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "output"
    assert report["task_figures"]["mean_iou"] < 0.99


@pytest.mark.parametrize("model, spec, words", [
    ("cutout_nan", SPEC, "non-finite"), ("cutout", PROJECT_ROOT / "model_repository" / "segmentation.toml",
                                         "C-class logits")])
def test_nan_logits_or_logits_under_a_saliency_are_error_rows_not_a_crash(foreign, photo, tmp_path, model, spec,
                                                                          words):
    """Nothing to compare (exit 2): the row's error says why."""
    result, report = check(foreign, photo, tmp_path, model, "--spec", spec)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    rows = list(csv.DictReader((tmp_path / "per_image.csv").open()))
    assert len(rows) == 1 and words in rows[0]["error"], rows


def test_a_mask_of_the_wrong_size_diverges_saying_so(foreign, photo, tmp_path):
    """A deployment answering its own alpha and mask (read by name) at 320x320, not the photo's size."""
    result, report = check(foreign, photo, tmp_path, "cutout_small_mask", "--spec", SPEC)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert report["first_divergent_stage"] == "postprocess"
    (event,) = report["events"]
    assert "wrong size" in event["problem"], event
