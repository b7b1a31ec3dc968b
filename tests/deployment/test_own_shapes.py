"""Deployments of the tests' own making (tests/own/deployments.py), in the common shapes users
build, on the real embedded tritonserver with real photos over gRPC and HTTP: a normalized NHWC
step before a layout step and the classifier; one model answering only probabilities; the
client's own preprocessing feeding a tensor model (one input, and an image with a scale
factor). Aligned, each passes on dark and bright photos alike; planted, each fails where it
should and ``diagnose`` names the cause; a diagnosis of an aligned deployment finds nothing
and writes no spec; a training callable is fingerprinted."""

import io
import json

import pytest
from PIL import Image, ImageEnhance

from tests.commands import harness
from tests.conftest import copy_photos, encode
from tests.deployment.test_discovery import text
from tests.own.deployments import CLIENTS, TRAINING_SPEC, serve

pytestmark = pytest.mark.server  # every test reads deployments this module serves

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "grace_hopper.jpg"]
SHAPES = ("normalized_nhwc", "softmax_only", "client")
TRAINING_CODE = CLIENTS.parent / "training_code.py"


@pytest.fixture(scope="module")
def onnx(repository):
    return repository / "classifier" / "model.onnx"


@pytest.fixture(scope="module")
def aligned(onnx, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("aligned") / "repository", SHAPES, onnx) as server:
        yield server


@pytest.fixture(scope="module")
def planted(onnx, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("planted") / "repository", SHAPES, onnx, channel_order="BGR",
               mode="stretch") as server:
        yield server


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


def lit(photos_dir, directory, factor: float):
    """The photos re-encoded with their brightness scaled by ``factor``."""
    directory.mkdir()
    for name in PHOTOS[:4]:
        with Image.open(io.BytesIO((photos_dir / name).read_bytes())) as image:
            (directory / name).write_bytes(encode(ImageEnhance.Brightness(image.convert("RGB")).enhance(factor), quality=95))
    return directory


@pytest.fixture(scope="module", params=[0.2, 1.7], ids=["dark", "bright"])
def lit_images(photos_dir, tmp_path_factory, request):
    return lit(photos_dir, tmp_path_factory.mktemp("lit") / "photos", request.param)


def run(command, server, images, report, *options, protocol="grpc", onnx=None, spec=TRAINING_SPEC):
    return harness(command, images, "--url", server.url(protocol), "--protocol", protocol, "--spec", spec,
                   "--reference-model", onnx, "--report", report, *options)


def stages_of(report_dir) -> dict:
    return {s["name"]: s for s in json.loads((report_dir / "report.json").read_text())["stages"]}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_normalized_nhwc_step_is_read_as_the_normalized_input_on_dark_and_bright_photos(aligned, lit_images, onnx,
                                                                                          tmp_path, protocol):
    result = run("check", aligned, lit_images, tmp_path, "--model", "norm_classifier", protocol=protocol, onnx=onnx)
    assert result.returncode == 0, result.stdout + result.stderr
    stages = stages_of(tmp_path)
    assert {name: s["verdict"] for name, s in stages.items()} == {"input": "equal", "output": "equal", "topk": "equal"}
    assert stages["input"]["isolated_verdict"] == "equal"  # the layout step alone, fed the reference's input: nothing
    mapping = json.loads((tmp_path / "report.json").read_text())["deployed"]["deployment"]["mapping"]
    assert [(m["step"], m["stage"]) for m in mapping] == [("prep_nhwc", None), ("to_nchw", "input"), ("net", "output")]
    assert "normalized" in mapping[0]["why"] and "compared at the later to_nchw.y" in mapping[0]["why"]
    assert "to_nchw fed the reference's input as prep_nhwc.normalized_nhwc holds it" in text(result.stdout)


def test_planted_in_the_normalized_step_fails_check_and_diagnose_names_both(planted, images, onnx, tmp_path):
    check = run("check", planted, images, tmp_path / "check", "--model", "norm_classifier", onnx=onnx)
    assert check.returncode == 1, check.stderr
    stages = stages_of(tmp_path / "check")
    assert stages["input"]["verdict"] == "diverged" and stages["input"]["isolated_verdict"] == "equal"  # not the layout step
    written = tmp_path / "fixed.toml"
    result = run("diagnose", planted, images, tmp_path / "diagnose", "--model", "norm_classifier", "--write-spec",
                 written, onnx=onnx)
    assert result.returncode == 1, result.stdout + result.stderr  # as check's
    diagnosis = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert {c["culprit"] for c in diagnosis["causes"]} == {"resize mode", "channel order"}  # the order: the images'
    assert diagnosis["fingerprint"].startswith("BGR; stretched to 224x224")
    fixed = run("check", planted, images, tmp_path / "fixed", "--model", "norm_classifier", onnx=onnx, spec=written)
    assert fixed.returncode == 0, fixed.stdout


def test_a_diagnosis_of_an_aligned_deployment_finds_nothing_and_writes_no_spec(aligned, images, onnx, tmp_path):
    written = tmp_path / "fixed.toml"
    result = run("diagnose", aligned, images, tmp_path, "--model", "norm_classifier", "--write-spec", written, onnx=onnx)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads((tmp_path / "diagnosis.json").read_text())
    assert diagnosis["causes"] == [] and diagnosis["fingerprint"] is None and diagnosis["written_spec"] is None
    assert not written.exists() and "nothing written" in text(result.stderr)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_model_answering_only_probabilities_is_judged_as_a_distribution(aligned, planted, images, onnx, tmp_path,
                                                                         protocol):
    good = run("check", aligned, images, tmp_path / "good", "--model", "softmax_only", protocol=protocol, onnx=onnx)
    assert good.returncode == 0, good.stdout
    assert "| topk | equal |" in good.stdout  # a row of the table
    bad = run("check", planted, images, tmp_path / "bad", "--model", "softmax_only", protocol=protocol, onnx=onnx)
    assert bad.returncode == 1, bad.stderr
    output = stages_of(tmp_path / "bad")["output"]
    assert output["verdict"] == "diverged" and output["metrics"]["total_variation"]["worst"] > 0.2
    report = json.loads((tmp_path / "bad" / "report.json").read_text())
    assert report["run"]["scores_kind"] == "probabilities" and report["run"]["tie_margin"] == 0.05
    assert "reference margin (probability)" in bad.stdout or not report["flips"]


def test_diagnose_names_the_cause_in_a_model_answering_only_probabilities(planted, images, onnx, tmp_path):
    result = run("diagnose", planted, images, tmp_path, "--model", "softmax_only", onnx=onnx)
    assert result.returncode == 1, result.stdout + result.stderr
    diagnosis = json.loads((tmp_path / "diagnosis.json").read_text())
    assert {c["culprit"] for c in diagnosis["causes"]} == {"channel order", "resize mode"}
    assert diagnosis["scores_kind"] == "probabilities" and diagnosis["remaining_divergence"] is None


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_clients_own_preprocessing_feeding_a_tensor_model(aligned, images, lit_images, onnx, tmp_path, protocol):
    for name, photos in (("images", images), ("lit", lit_images)):
        result = run("check", aligned, photos, tmp_path / name, "--model", "net", "--client", f"{CLIENTS}:preprocess",
                     protocol=protocol, onnx=onnx)
        assert result.returncode == 0, result.stdout + result.stderr
        stages = stages_of(tmp_path / name)
        assert stages["input"]["verdict"] == "equal" and stages["output"]["isolated_verdict"] == "equal"
    bgr = run("check", aligned, images, tmp_path / "bgr", "--model", "net", "--client", f"{CLIENTS}:preprocess_bgr",
              protocol=protocol, onnx=onnx)
    assert bgr.returncode == 1 and stages_of(tmp_path / "bgr")["input"]["verdict"] == "diverged"


def test_a_client_making_an_image_and_a_scale_factor_for_a_two_input_model(aligned, images, onnx, tmp_path):
    good = run("check", aligned, images, tmp_path / "good", "--model", "scaled_net", "--client",
               f"{CLIENTS}:preprocess_scaled", onnx=onnx)
    assert good.returncode == 0, good.stdout + good.stderr
    stages = stages_of(tmp_path / "good")
    assert stages["crop"]["verdict"] == "equal"  # the 0-255 image is the crop; the scale factor goes as the client made it
    assert stages["output"]["isolated"] is not None  # the model fed the reference's crop beside the client's factor
    result = run("diagnose", aligned, images, tmp_path / "diagnose", "--model", "scaled_net", "--client",
                 f"{CLIENTS}:preprocess_scaled_stretch", onnx=onnx)
    assert result.returncode == 1, result.stdout + result.stderr
    diagnosis = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert [c["culprit"] for c in diagnosis["causes"]] == ["resize mode"]
    assert "preprocess_scaled_stretch` behaves as if resize.mode = \"stretch\"" in diagnosis["recommendation"]


def test_accuracy_repeat_and_loadtest_take_the_client(aligned, images, onnx, tmp_path):
    from tests.loadtest.test_sweep import SHORT, against, sweep

    client = f"{CLIENTS}:preprocess_bgr"
    accuracy = harness("accuracy", images, "--url", aligned.grpc_url, "--model", "net", "--client", client, "--spec",
                       TRAINING_SPEC, "--reference-model", onnx, "--report", tmp_path / "accuracy")
    paths = {p["path"]: p for p in json.loads((tmp_path / "accuracy" / "accuracy.json").read_text())["effect"]["paths"]}
    assert accuracy.returncode == 1 and paths["net fed by " + client]["flips"] >= 1, accuracy.stdout
    repeat = harness("repeat", images, "--url", aligned.grpc_url, "--model", "net", "--client", client, "--spec",
                     TRAINING_SPEC, "--limit", 3, "--repeats", 1, "--report", tmp_path / "repeat")
    assert repeat.returncode == 0, repeat.stderr
    assert json.loads((tmp_path / "repeat" / "repeat.json").read_text())["verdict"] == "equal"
    load = sweep(*against(aligned), "--model", "net", "--client", f"{CLIENTS}:preprocess", "--protocols", "grpc",
                 "--clients", 2, "--bad-fraction", 0.25, *SHORT, "--out", tmp_path / "load")
    assert load.returncode == 0, load.stderr
    stats = json.loads((tmp_path / "load" / "results.json").read_text())["points"][0]["stats"]
    assert stats["requests"] > 0 and stats["failed_photos"] == 0
    assert set(stats["errors"]) == {"client preprocess failed"}  # bad files fail in the client, counted by type


def test_a_training_callable_is_fingerprinted_then_the_deployment_diagnosed_against_it(aligned, photos_dir, onnx,
                                                                                      tmp_path):
    # aero3 and china: resized to an odd number of pixels beyond the crop, where (H - 224) // 2
    # and Python's round() part (on the others the two roundings tie).
    images = copy_photos(photos_dir, [*PHOTOS, "aero3.jpg", "china.jpg"], tmp_path / "images")
    written, deployment = tmp_path / "training.toml", tmp_path / "deployment.toml"
    result = run("diagnose", aligned, images, tmp_path / "reproduced", "--model", "norm_classifier", "--reference",
                 f"{TRAINING_CODE}:train_transform", "--write-training-spec", written, "--write-spec", deployment,
                 onnx=onnx)
    assert result.returncode == 1, result.stdout + result.stderr  # the callable itself diverges (check's verdict)
    diagnosis = json.loads((tmp_path / "reproduced" / "diagnosis.json").read_text())
    fingerprint = diagnosis["training_fingerprint"]
    assert fingerprint["reproduced"] and set(fingerprint["changes_from_the_spec"]) == {
        "crop offsets rounded floor", "size rounding floor"}  # (H - 224) // 2 and int() sizes
    assert {c["cause"] for c in diagnosis["causes"]} == {"crop offsets rounded half_up", "size rounding half_up"}
    assert 'offset_rounding = "floor"' in written.read_text()  # the user's training, as a spec
    assert 'offset_rounding = "half_up"' in deployment.read_text()  # and as the deployment behaves, in one run
    assert "Training spec (your training as it is, --write-training-spec)" in text(result.stdout)
    gamma = run("diagnose", aligned, images, tmp_path / "gamma", "--model", "norm_classifier", "--reference",
                f"{TRAINING_CODE}:train_transform_with_gamma", "--write-training-spec", tmp_path / "none.toml",
                onnx=onnx)
    assert gamma.returncode == 1, gamma.stdout  # no spec reproduces it, and it diverges from the deployment
    assert not (tmp_path / "none.toml").exists() and "no spec reproduces the training callable" in text(gamma.stderr)
    assert "is not reproduced by any spec" in text(gamma.stdout)


@pytest.mark.parametrize("arguments, message", [
    (["--client", f"{CLIENTS}:preprocess"], "--client"),  # without --model
    (["--model", "net", "--client", f"{CLIENTS}:nowhere"], "defines no 'nowhere'"),
    (["--model", "scaled_net", "--client", f"{CLIENTS}:preprocess"], "returned one tensor; scaled_net takes 2 inputs"),
    (["--model", "net"], "not an encoded image"),
])
def test_what_a_client_cannot_do_is_one_line(aligned, images, onnx, tmp_path, arguments, message):
    result = run("check", aligned, images, tmp_path, *arguments, onnx=onnx)
    assert result.returncode == 2 and message in text(result.stderr), result.stderr
    assert "Traceback" not in result.stderr


def test_a_server_of_other_models_and_the_other_protocol_are_named(aligned, images, onnx, tmp_path):
    from tests.loadtest.test_sweep import SHORT, against, sweep

    result = harness("check", images, "--url", aligned.grpc_url, "--report", tmp_path / "pipeline")
    assert result.returncode == 2 and "give --model NAME" in text(result.stderr), result.stderr
    assert "norm_classifier" in text(result.stderr) and "Traceback" not in result.stderr
    result = harness("check", images, "--url", aligned.http_url, "--model", "net", "--reference-model", onnx)
    assert result.returncode == 2 and "add --protocol http" in text(result.stderr)
    load = sweep(*against(aligned), "--model", "net", "--protocols", "grpc", "--clients", 1, *SHORT, "--out", tmp_path)
    assert load.returncode == 2 and "not an encoded image" in text(load.stderr) and "--client" in text(load.stderr)
