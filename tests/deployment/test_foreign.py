"""Every command against a foreign deployment (examples/foreign_deployment: BYTES input, NHWC
float preprocessing, a layout step, an ONNX classifier step, its own names), served for real
by the embedded tritonserver: aligned it passes, with planted differences it fails at the
right stage and diagnose names them, and what cannot be checked is a one-line exit 2."""

import json
import re

import numpy as np
import pytest

from harness.client import TritonClient
from harness.deployment import discover
from harness.deployment.stepwise import StepwiseDeployment
from harness.task import TASKS
from tests.commands import harness
from tests.conftest import copy_photos
from tests.deployment.test_discovery import text
from tests.foreign import ENSEMBLE, STEPS, TRAINING_SPEC, serve_foreign

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "grace_hopper.jpg",
          "aero3.jpg", "china.jpg"]


@pytest.fixture(scope="module")
def onnx(repository):
    return repository / "classifier" / "model.onnx"


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def few_images(photos_dir, tmp_path_factory):
    """The first three photos: a twin's run over another transport (the transport itself is
    covered request by request in tests/test_foreign_repository.py)."""
    return copy_photos(photos_dir, PHOTOS[:3], tmp_path_factory.mktemp("few"))


@pytest.fixture
def aligned(foreign_aligned):
    return foreign_aligned  # one server for every module that uses it (tests/conftest.py)


@pytest.fixture
def planted(foreign_planted):
    return foreign_planted


def check(server, images, report, *options, protocol="grpc", onnx=None, html=False):
    return harness("check", images, "--url", server.url(protocol), "--protocol", protocol, "--model", ENSEMBLE,
                   "--spec", TRAINING_SPEC, "--reference-model", onnx, "--report", report, *options, html=html)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_aligned_deployment_passes_check_stage_by_stage(aligned, images, few_images, onnx, tmp_path, protocol):
    photos = images if protocol == "grpc" else few_images  # the whole set over one transport
    count = len(list(photos.iterdir()))
    result = check(aligned, photos, tmp_path, protocol=protocol, onnx=onnx, html=True)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = {s["name"]: s["verdict"] for s in report["stages"]}
    assert verdicts == {"crop": "equal", "input": "equal", "output": "equal", "topk": "equal"}
    assert report["compared"] == count
    deployment = report["deployed"]["deployment"]
    assert deployment["image_input"] == "encoded_image STRING [1] (bytes, batched)"
    assert [(m["step"], m["stage"]) for m in deployment["mapping"]] == [
        ("jpeg_to_tensor", "crop"), ("hwc_to_chw", "input"), ("effnet_scores", "output")]
    assert deployment["replay"] == {"images": count, "mismatched": 0, "mismatched_images": [],
                                    "max_abs_diff": 0.0, "trusted": True}
    isolated = {s["name"]: s["isolated"] for s in report["stages"]}
    assert isolated["input"] is not None and isolated["output"] is not None  # steps fed the reference's stages
    assert "jpeg_to_tensor.image_nhwc -> crop" in result.stdout
    assert "Deployment found on the server" in (tmp_path / "report.html").read_text()


def test_the_step_by_step_replay_equals_the_ensemble_on_every_photo(aligned, photos_dir):
    with TritonClient(aligned.grpc_url, "grpc") as client:
        deployment = discover(client, ENSEMBLE, (photos_dir / PHOTOS[0]).read_bytes(), (224, 224), tasks=TASKS)
        assert isinstance(deployment, StepwiseDeployment) and [s.model for s, _ in deployment.steps] == list(STEPS)
        for name in PHOTOS:
            data = (photos_dir / name).read_bytes()
            replayed = deployment.replay_steps(client, data)["scores"][0]
            np.testing.assert_array_equal(replayed, deployment.scores(client, [data])[0])


def test_planted_differences_fail_check_at_crop_and_diagnose_names_both(planted, images, onnx, tmp_path):
    result = check(planted, images, tmp_path / "check", onnx=onnx)
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    assert report["first_divergent_stage"] == "crop"
    written = tmp_path / "fixed.toml"
    diagnosed = harness("diagnose", images, "--url", planted.grpc_url, "--model", ENSEMBLE, "--spec", TRAINING_SPEC,
                        "--reference-model", onnx, "--report", tmp_path / "diagnose", "--write-spec", written)
    assert diagnosed.returncode == 1, diagnosed.stderr  # explained; check's rule still fails the run
    diagnosis = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert {c["culprit"] for c in diagnosis["causes"]} == {"resize antialias", "channel order"}
    assert diagnosis["remaining_divergence"] is None
    assert diagnosis["fingerprint"].startswith("BGR; stretched to 224x224 (linear, no antialias")
    assert "the deployment `image_classifier` behaves as if" in diagnosis["recommendation"]
    fixed = check(planted, images, tmp_path / "fixed", "--spec", written, onnx=onnx)
    assert fixed.returncode == 0, fixed.stdout  # training as the deployment behaves: nothing diverges


def test_accuracy_and_infer_on_foreign_models(aligned, planted, images, onnx, tmp_path):
    # Two servers: each --model is read on the one server of --url; score each against the reference.
    flips = {}
    for name, server in (("aligned", aligned), ("planted", planted)):
        result = harness("accuracy", images, "--url", server.grpc_url, "--model", ENSEMBLE, "--spec", TRAINING_SPEC,
                         "--reference-model", onnx, "--report", tmp_path / name)
        report = json.loads((tmp_path / name / "accuracy.json").read_text())
        paths = {p["path"]: p for p in report["effect"]["paths"]}
        assert set(paths) == {"reference", ENSEMBLE} and report["dataset"]["evaluated"] == len(PHOTOS), result.stderr
        flips[name] = (result.returncode, paths[ENSEMBLE]["flips"])
    assert flips["aligned"] == (0, 0) and flips["planted"][0] == 1 and flips["planted"][1] >= 1, flips
    infer = harness("infer", images / "baboon.jpg", "--url", aligned.grpc_url, "--model", ENSEMBLE, "--top-k", "3")
    # effnet_scores has no label file: Triton's classification extension answers class indices, which the
    # repository's labels (the same 1000 classes) name; all three of the top-3 are printed.
    assert infer.returncode == 0 and " baboon" in infer.stdout, infer.stdout
    assert len(re.findall(r"\d\.\d{3} [a-z]", infer.stdout)) == 3, infer.stdout
    assert "scores scores FP32 [1000]" in text(infer.stderr)


def test_an_unbatched_deployment_is_checked_one_image_a_request(foreign_unbatched, onnx, images, tmp_path):
    result = check(foreign_unbatched, images, tmp_path / "report", onnx=onnx)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["deployed"]["deployment"]["image_input"] == "encoded_image STRING [1] (bytes, one image per request)"
    assert {s["name"] for s in report["stages"]} == {"crop", "input", "output", "topk"}


@pytest.mark.server  # starts its own tritonserver
def test_a_step_missing_from_the_server_is_a_clear_error(onnx, images, tmp_path):
    from harness.server import TritonServer, free_port
    from tests.foreign import write_foreign_repository

    repository = write_foreign_repository(tmp_path / "repository", onnx)
    # The ensemble and its steps load, then one step is unloaded: the ensemble stops being
    # ready, so discovery names the ensemble; explicit mode keeps every other model.
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=[ENSEMBLE, *STEPS])
    with server:
        with TritonClient(server.http_url, "http") as client:
            client._client.unload_model("hwc_to_chw")
        result = check(server, images, tmp_path / "report", onnx=onnx)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "not ready" in text(result.stderr)


def test_bad_stage_override_and_a_stage_set_in_the_spec(aligned, images, onnx, tmp_path):
    result = check(aligned, images, tmp_path / "none", "--stage", "jpeg_to_tensor=none", onnx=onnx)
    report = json.loads((tmp_path / "none" / "report.json").read_text())
    assert result.returncode == 0 and [s["name"] for s in report["stages"]] == ["input", "output", "topk"]
    spec = tmp_path / "spec.toml"
    spec.write_text(f'extends = "{TRAINING_SPEC}"\n[deployment.stages]\n"effnet_scores.class_scores" = "crop"\n')
    bad = check(aligned, images, tmp_path / "bad", "--spec", spec, onnx=onnx)
    assert bad.returncode == 2 and "cannot be compared as crop" in text(bad.stderr), bad.stderr


@pytest.mark.server  # starts its own tritonserver
def test_a_server_that_stops_mid_run_ends_it_naming_the_server(onnx, images, tmp_path):
    import subprocess
    import sys
    import time

    with serve_foreign(tmp_path / "repository", onnx) as server:
        run = subprocess.Popen([sys.executable, "-m", "harness", "check", str(images), "--url", server.grpc_url,
                                "--model", ENSEMBLE, "--spec", str(TRAINING_SPEC), "--reference-model", str(onnx),
                                "--retries", "1", "--workers", "1", "--report", str(tmp_path / "report")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        results = tmp_path / "report" / "images.jsonl"
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
            time.sleep(0.05)
        server.stop()
        out, err = run.communicate(timeout=120)
    assert run.returncode == 2, err
    assert f"the Triton server at {server.grpc_url} stopped answering" in text(err)
    assert "--resume" in text(err) and "Traceback" not in err


def test_loadtest_sends_the_foreign_models_own_input(aligned, server, tmp_path):
    from tests.loadtest.test_sweep import SHORT, against, sweep

    run = sweep(*against(aligned), "--model", ENSEMBLE, "--protocols", "grpc", "http", "--clients", 2,
                "--bad-fraction", 0.25, *SHORT, "--out", tmp_path / "foreign")
    assert run.returncode == 0, run.stderr
    for point in json.loads((tmp_path / "foreign" / "results.json").read_text())["points"]:
        stats = point["stats"]
        assert point["ensemble"] == ENSEMBLE and stats["requests"] > 0 and stats["failed_photos"] == 0
        assert set(stats["errors"]) == {"cannot decode"}  # BYTES payloads reached PIL, bad ones failed alone
        assert {b["model"] for b in point["breakdown"]} == {ENSEMBLE, *STEPS}
    # Two models of one server, named: A's QPS against B's in the table.
    run = sweep(*against(server), "--model", "classify_opencv", "--model", "classify_dali", "--protocols", "grpc",
                "--clients", 1, *SHORT, "--out", tmp_path / "pair")
    assert run.returncode == 0, run.stderr
    table = (tmp_path / "pair" / "comparison.md").read_text()
    assert "classify_opencv vs classify_dali QPS" in table


def test_diagnose_from_the_scores_alone_still_names_both_causes(planted, images, onnx, tmp_path):
    # As against a deployment that exposes nothing but its answer (a single DALI model, say):
    # every hypothesis is judged by the output error and the top-1 flips.
    result = harness("diagnose", images, "--url", planted.grpc_url, "--model", ENSEMBLE, "--spec", TRAINING_SPEC,
                     "--reference-model", onnx, "--stage", "jpeg_to_tensor=none", "--stage", "hwc_to_chw=none",
                     "--report", tmp_path)
    assert result.returncode == 1, result.stderr
    diagnosis = json.loads((tmp_path / "diagnosis.json").read_text())
    assert diagnosis["first_divergent_stage"] == "output"
    assert {c["culprit"] for c in diagnosis["causes"]} == {"resize antialias", "channel order"}


def test_repeat_on_a_foreign_deployment_sends_its_own_input(aligned, images, tmp_path):
    result = harness("repeat", images, "--url", aligned.grpc_url, "--model", ENSEMBLE, "--spec", TRAINING_SPEC,
                     "--limit", 3, "--repeats", 1, "--report", tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "repeat.json").read_text())
    spreads = {(s["probe"], s["stage"]) for s in report["spreads"]}
    assert spreads == {(ENSEMBLE, "output"), ("effnet_scores", "classifier")}  # the classifier step alone too
    assert report["verdict"] == "equal"  # the cpu profile's Python and ONNX Runtime steps answer the same every time
