"""The engine builder's input (harness/engine_input.py): written from each TensorRT model's config with
Triton's protobuf, read by docker/build_engine.py (standard library only), for any class count and crop
size, and refused when its config changed after it was written. No server."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine_input import HOW_TO_WRITE, read_engine_input
from harness.repository import engine_input, load_config, set_class_count, set_input_size
from harness.task import shipped_engines

ROOT = Path(__file__).resolve().parents[1]
BUILD_ENGINE = ROOT / "docker" / "build_engine.py"


def build_engine(*args):
    return subprocess.run([sys.executable, str(BUILD_ENGINE), "--dry-run", *map(str, args)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TRTEXEC": "trtexec", "OPT_BATCH": "8"})


@pytest.mark.parametrize("model", shipped_engines())
def test_each_engine_models_input_file_is_what_triton_reads_in_its_config(model):
    model_dir = ROOT / "model_repository" / model
    assert read_engine_input(model_dir) == engine_input(model_dir), HOW_TO_WRITE


@pytest.fixture
def classifier_only(tmp_path):
    """A repository of the classifier's checked-in folder (its ONNX linked: the builder asks for it)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository" / "classifier", repo / "classifier",
                    ignore=shutil.ignore_patterns("*.onnx", "1", "labels.txt"))
    (repo / "classifier" / "model.onnx").symlink_to(ROOT / "model_repository" / "classifier" / "model.onnx")
    return repo


def test_a_class_count_and_crop_set_through_protobuf_build_with_their_shapes(classifier_only, tmp_path):
    """set_class_count and set_input_size write protobuf's expanded text form (`input {`), which the
    builder's former regex refused ("config.pbtxt has no max_batch_size or no input block")."""
    assert set_class_count(classifier_only, 37) == ["classifier"]
    assert set_input_size(classifier_only, (224, 224), (256, 256)) == ["classifier"]
    config = classifier_only / "classifier" / "config.pbtxt"
    assert "input {" in config.read_text() and list(load_config(config).output[0].dims) == [37]
    run = build_engine("--repository", classifier_only, "--out", tmp_path / "engine")
    assert run.returncode == 0, run.stderr
    assert {"--minShapes=input:1x3x256x256", "--optShapes=input:8x3x256x256",
            "--maxShapes=input:64x3x256x256"} <= set(run.stdout.split())


def test_a_config_edited_after_its_input_file_is_refused(classifier_only, tmp_path):
    config = classifier_only / "classifier" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 64", "max_batch_size: 16"))
    run = build_engine("--repository", classifier_only, "--out", tmp_path / "engine")
    assert run.returncode == 2 and "engine_input.json was not written from" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    (classifier_only / "classifier" / "engine_input.json").unlink()
    run = build_engine("--repository", classifier_only, "--out", tmp_path / "engine")
    assert run.returncode == 2 and "engine_input.json not found" in run.stderr, run.stderr


def test_a_windows_checkouts_line_ends_are_the_same_config(classifier_only, tmp_path):
    config = classifier_only / "classifier" / "config.pbtxt"
    config.write_bytes(config.read_bytes().replace(b"\n", b"\r\n"))  # git's autocrlf
    assert build_engine("--repository", classifier_only, "--out", tmp_path / "engine").returncode == 0
