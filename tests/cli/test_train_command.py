"""`harness train` as a user runs it (a subprocess): the model it writes is accepted by
`harness model import` and served through both ensembles, agreeing with in-process."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from harness.client import TritonClient
from harness.model import LABELS_FILENAME, ONNX_FILENAME, onnx_session, read_labels
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.training.deploy import serve_trained
from tests.commands import harness
from tests.training.conftest import hymenoptera_slice


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = hymenoptera_slice(tmp_path_factory.mktemp("train-cli") / "set", 4, 2)
    (root / "train" / "ants" / "readme.jpg").write_text("not an image")
    return root


@pytest.mark.server  # starts its own tritonserver
def test_train_writes_a_model_that_import_accepts_and_the_server_serves(dataset, repository, spec, tmp_path):
    out = tmp_path / "model"
    result = harness("train", dataset, "--out", out, "--epochs", "2", "--batch-size", "4", "--workers", "0",
                     "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert f"model: {out / ONNX_FILENAME}" in result.stdout and "1 skipped" in result.stdout
    stderr = " ".join(result.stderr.split())  # rich wraps long lines
    assert "ants/readme.jpg: not an image" in stderr and "epoch 2/2" in stderr
    assert read_labels(out / LABELS_FILENAME) == ["ants", "bees"]
    summary = json.loads((out / "training.json").read_text())
    assert summary["config"]["preprocessing"] == "deployed" and summary["train_images"] == 9
    assert list(summary["skipped"]) == ["ants/readme.jpg"] and len(summary["history"]) == 2

    imported = tmp_path / "repository"
    shutil.copytree(repository, imported, ignore=shutil.ignore_patterns("*.plan"))
    result = harness("model", "import", out / ONNX_FILENAME, "--class-names", out / LABELS_FILENAME,
                     "--repository", imported)
    assert result.returncode == 0, result.stderr

    photos = sorted((dataset / "val" / "bees").iterdir()) + sorted((dataset / "val" / "ants").iterdir())
    images = [p.read_bytes() for p in photos]
    runner = CpuPipelineRunner(spec.preprocess, max_batch_size=len(images))
    inputs = np.stack([r.outputs[0] for r in runner.run([np.frombuffer(b, np.uint8) for b in images])])
    in_process = onnx_session(out / ONNX_FILENAME).run(["logits"], {"input": inputs})[0]
    with serve_trained(repository, out, tmp_path / "serving") as server, \
            TritonClient(server.url("grpc"), "grpc") as client:
        for pipeline in ("dali", "opencv"):
            served = client.logits(images, pipeline)
            assert served.shape == (4, 2)
            # Same DALI graph (dali) or one 8-bit level apart (opencv): the logits barely move.
            assert np.max(np.abs(served - in_process)) < (1e-4 if pipeline == "dali" else 0.1), pipeline
        top = client.classify(images[:1], "dali", top_k=1)[0][0]
        assert top.label in ("ants", "bees")


@pytest.mark.parametrize("option, message", [(("--preprocessing", "nvjpeg"), "preprocessing must be one of"),
                                             (("--fraction", "0"), "argument --fraction: must be more than 0"),
                                             (("--epochs", "0"), "at least 1")])
def test_bad_options_exit_2(dataset, tmp_path, option, message):
    result = harness("train", dataset, "--out", tmp_path, *option)
    assert result.returncode == 2 and message in " ".join(result.stderr.split())


def test_a_dataset_without_classes_exits_2(tmp_path):
    (tmp_path / "x.jpg").write_bytes(b"\xff\xd8\xff")
    result = harness("train", tmp_path, "--out", tmp_path / "out")
    assert result.returncode == 2 and "no class directories" in " ".join(result.stderr.split())
