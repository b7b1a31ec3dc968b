"""Discovery against the real embedded server: this repository's own models, read as a
foreign user's would be (their configs over HTTP and gRPC), and the ways it refuses."""

import json

import numpy as np
import pytest

from harness.deployment import DeploymentError, ModelDeployment, StepwiseDeployment, discover, read_model
from harness.deployment.discovery import image_input, parse_config, scores_output
from harness.stage import Stage
from harness.task import TASKS
from tests.commands import harness
from tests.conftest import copy_photos

FEW = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg"]


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("images"))


def test_an_ensemble_is_read_from_its_config_over_either_protocol(client):
    info = read_model(client, "classify_dali")
    assert info.is_ensemble and info.batched
    assert [s.model for s in info.steps] == ["validate_image", "preprocess_dali", "classifier"]
    assert image_input(info).describe() == "IMAGE UINT8 [-1]"
    assert scores_output(info).name == "LOGITS" and scores_output(info, prefer="prob").name == "PROBABILITIES"


def test_the_ensemble_replayed_step_by_step_matches_its_stages_and_its_answer(client, photo):
    deployment = discover(client, "classify_dali", photo("squirrel_cls.jpg"), (224, 224), tasks=TASKS)
    assert isinstance(deployment, StepwiseDeployment)
    assert deployment.stages == (Stage.INPUT, Stage.OUTPUT) and deployment.isolates == {Stage.OUTPUT: Stage.INPUT}
    mapped = {(m.step, m.tensor): m.stage for m in deployment.mappings}
    assert mapped[("preprocess_dali", "INPUT")] is Stage.INPUT and mapped[("classifier", "logits")] is Stage.OUTPUT
    assert mapped[("validate_image", "VALIDATED")] is None  # listed, not dropped
    stages = deployment.read(client, photo("baboon.jpg"), "baboon.jpg")
    taps = client.deployed(photo("baboon.jpg"), "dali")
    np.testing.assert_array_equal(stages[Stage.INPUT], taps[Stage.INPUT])  # the same tensor the taps model gives
    np.testing.assert_allclose(stages[Stage.OUTPUT], taps[Stage.OUTPUT], atol=1e-5)
    assert deployment.replay.images == 1 and not deployment.replay.mismatched


def test_a_one_model_deployment_config_is_understood():
    # A DALI-backend model returning scores (a user's one-model deployment), as gRPC's
    # MessageToDict gives its config: int64 dims as strings.
    config = {"name": "resnet_dali", "backend": "dali", "max_batch_size": 8,
              "input": [{"name": "DALI_INPUT_0", "data_type": "TYPE_UINT8", "dims": ["-1"]}],
              "output": [{"name": "probs", "data_type": "TYPE_FP32", "dims": ["1000"]}]}
    info = parse_config(config)
    assert image_input(info).name == "DALI_INPUT_0" and scores_output(info).name == "probs"
    assert ModelDeployment.stages == (Stage.OUTPUT,)
    stateful = parse_config({**config, "sequence_batching": {"max_sequence_idle_microseconds": 1000}})
    with pytest.raises(DeploymentError, match="sequence batcher"):
        image_input(stateful)


@pytest.mark.parametrize("model, message", [
    ("no_such_model", "not ready"),
    ("classifier", "not an encoded image"),
    ("preprocess_dali_taps", "no output of class scores"),
])
def test_what_discovery_cannot_use_is_refused_naming_it(client, photo, model, message):
    with pytest.raises(DeploymentError, match=message):
        discover(client, model, photo("squirrel_cls.jpg"), (224, 224), tasks=TASKS)


def test_check_through_model_gives_the_pipelines_verdicts_on_the_stages_both_read(server, images, tmp_path):
    by_model = harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--report", tmp_path / "m")
    by_pipeline = harness("check", images, "--url", server.grpc_url, "--pipeline", "dali", "--report", tmp_path / "p")
    assert by_model.returncode == by_pipeline.returncode == 0, by_model.stderr
    model = json.loads((tmp_path / "m" / "report.json").read_text())
    pipeline = json.loads((tmp_path / "p" / "report.json").read_text())
    verdicts = {s["name"]: s["verdict"] for s in model["stages"]}
    assert list(verdicts) == ["input", "output", "topk"]
    assert verdicts == {s["name"]: s["verdict"] for s in pipeline["stages"] if s["name"] in verdicts}
    found = model["deployed"]["deployment"]
    assert found["replay"]["trusted"] and found["replay"]["images"] == len(FEW)
    assert "--pipeline reads every preprocessing stage from its taps model" in by_model.stdout


@pytest.mark.parametrize("arguments, message", [
    (["--model", "no_such_model"], "model 'no_such_model' is not ready"),
    (["--model", "classifier"], "not an encoded image"),
    (["--model", "preprocess_dali_taps"], "no output of class scores"),
    (["--model", "classify_dali", "--stage", "nowhere=crop"], "no such step output"),
    (["--model", "classify_dali", "--stage", "classifier=colour"], "expected STEP_MODEL=STAGE"),
    (["--model", "classify_dali", "--output", "LABELS"], "has no output 'LABELS'"),
])
def test_bad_deployment_arguments_are_one_line_errors_exit_2(server, images, repository, arguments, message):
    trained = repository / "classifier" / "model.onnx"
    result = harness("check", images, "--url", server.grpc_url, *arguments, "--reference-model", trained)
    assert result.returncode == 2 and message in text(result.stderr), result.stderr
    assert "Traceback" not in result.stderr


def text(stderr: str) -> str:
    """The message as one line (the console wraps long lines at its width)."""
    return " ".join(stderr.split())


def test_a_foreign_model_needs_the_trained_model(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--model", "some_ensemble")
    assert result.returncode == 2 and "--reference-model PATH" in text(result.stderr)
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_bytes(b"not a model")
    result = harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--reference-model", not_onnx)
    assert result.returncode == 2 and "is not an ONNX model" in text(result.stderr), result.stderr
    assert "Traceback" not in result.stderr


def test_an_output_of_probabilities_is_compared_with_the_references_softmax(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--output", "PROBABILITIES",
                     "--report", tmp_path)
    assert result.returncode == 0, result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["deployed"]["deployment"]["scores_kind"] == "probabilities"
    output_rule = report["spec"]["tolerances"]["output"]
    assert output_rule["atol"] == 0.05 and output_rule["max_fraction"] == 0  # every class, in probability units
    assert output_rule["max_total_variation"] == 0.2  # and the mass that moved
    assert report["run"]["tie_margin"] == 0.05 and report["run"]["scores_kind"] == "probabilities"
    output = {s["name"]: s for s in report["stages"]}["output"]
    assert output["verdict"] == "close" and output["metrics"]["max_abs"]["worst"] < 0.05
    assert output["metrics"]["total_variation"]["worst"] < 0.2
    top = {s["name"]: s for s in report["stages"]}["topk"]  # probabilities as they are: never a softmax of them
    assert 0.3 < top["metrics"]["reference_top1_prob"]["mean"] < 1
