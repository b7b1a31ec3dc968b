"""`harness check` and `harness compare` as a user runs them, against the real server."""

import csv
import json

import pytest

from tests.commands import harness
from tests.conftest import copy_photos

FEW = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "messi5.jpg"]


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("images"))


@pytest.mark.end_to_end  # make test-fast's one check against the real server
def test_aligned_check_writes_every_report_and_exits_0(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path, "--save-tensors", html=True)
    assert result.returncode == 0, result.stderr
    assert "No stage diverged" in result.stdout and str(tmp_path / "report.md") in result.stderr
    assert "do not depend on the image" not in result.stdout  # EfficientNet-Lite0 tells the photos apart
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["reference_answers_alike"] is False
    assert {"images", "failed", "stages", "first_divergent_stage", "spec", "versions"} <= set(report)
    assert [s["name"] for s in report["stages"]] == ["decode", "resize", "crop", "input", "output", "topk"]
    assert all({"name", "metrics", "isolated", "verdict"} <= set(s) for s in report["stages"])
    assert report["versions"]["tritonserver"] == "2.51.0" and report["versions"]["numpy"].startswith("1.")
    with (tmp_path / "per_image.csv").open() as f:
        assert sorted(row["image"] for row in csv.DictReader(f)) == sorted(FEW)
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64" in html and "<h2>resize" in html
    assert len(list((tmp_path / "tensors").glob("*.npz"))) == len(FEW)
    # `compare` against itself: every stage equal
    again = harness("compare", tmp_path, tmp_path, "--report", tmp_path / "self")
    assert again.returncode == 0, again.stderr
    assert all(s["verdict"] == "equal" for s in json.loads((tmp_path / "self" / "report.json").read_text())["stages"])


def untrained_classifier(path):
    """An ImageNet-shaped classifier whose answers do not depend on the image, as a randomly
    initialised network's (issue 59 item 4): the pooled input through weights of about 1e-8, plus
    a bias of the same size (logits about 1e-8, one class for every photo)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(59)
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["flat"]),
         helper.make_node("Gemm", ["flat", "weight", "bias"], ["logits"], transB=1)],
        "untrained", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
        [numpy_helper.from_array((rng.standard_normal((1000, 3)) * 1e-8).astype(np.float32), "weight"),
         numpy_helper.from_array((rng.standard_normal(1000) * 1e-8).astype(np.float32), "bias")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def test_a_reference_model_answering_every_image_alike_is_said_to_make_the_costs_meaningless(server, images, tmp_path):
    untrained = untrained_classifier(tmp_path / "untrained.onnx")
    result = harness("check", images, "--url", server.grpc_url, "--reference-model", untrained, "--report",
                     tmp_path / "report", "--no-isolate")
    assert result.returncode == 1, result.stdout + result.stderr  # the deployed EfficientNet answers otherwise
    printed = " ".join(result.stdout.split())
    assert "The reference model (onnxruntime (untrained.onnx)) answered every image alike" in printed
    assert "its answers do not depend on the image" in printed and "means nothing for it" in printed
    assert json.loads((tmp_path / "report" / "report.json").read_text())["run"]["reference_answers_alike"] is True


def test_fail_on_close_makes_the_aligned_check_fail(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path, "--fail-on", "close", "--no-isolate")
    assert result.returncode == 1  # the resize is close, not equal


def test_misaligned_spec_names_resize_and_exits_1(server, images, tmp_path, repository):
    spec = repository.parent / "specs" / "misaligned_resize.toml"
    result = harness("check", images, "--url", server.grpc_url, "--spec", spec, "--report", tmp_path,
                     "--fail-on", "diverged", "--protocol", "grpc")
    assert result.returncode == 1, result.stderr
    assert json.loads((tmp_path / "report.json").read_text())["first_divergent_stage"] == "resize"
    assert "**First divergent stage: resize**" in result.stdout


def test_a_real_decoder_difference_passes_check_by_the_decoder_rule(server, images, tmp_path, repository):
    # Training decoded with Pillow's YCbCr -> RGB instead of libjpeg-turbo's (docs/gpu.md): a
    # level off on most pixels, two after the resize, which the old every-value rule failed
    reference = f"{repository.parent / 'specs' / 'decoder_difference.py'}:pillow_ycbcr"
    result = harness("check", images, "--url", server.grpc_url, "--reference", reference, "--report", tmp_path,
                     "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr
    stages = {s["name"]: s for s in json.loads((tmp_path / "report.json").read_text())["stages"]}
    assert stages["decode"]["verdict"] == "close" and stages["decode"]["metrics"]["max_abs"]["worst"] == 1
    assert stages["resize"]["metrics"]["max_abs"]["worst"] == 2
    assert all(s["verdict"] != "diverged" for s in stages.values()), stages


def test_usage_errors_exit_2(server, images, tmp_path):
    missing_run = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "none", "--resume")
    assert missing_run.returncode == 2 and "no earlier run" in missing_run.stderr
    bad_reference = harness("check", images, "--url", server.grpc_url, "--reference", "nowhere.py:fn")
    assert bad_reference.returncode == 2 and "nowhere.py not found" in bad_reference.stderr
    no_dir = harness("check", tmp_path / "missing", "--url", server.grpc_url)
    assert no_dir.returncode == 2 and "image directory not found" in no_dir.stderr


WRONG_SHAPE_FILE = """
import numpy as np
def preprocess(data: bytes):
    return np.zeros((3, 100, 100), np.float32)  # the classifier takes 3x224x224
"""


def test_a_callable_reference_of_the_wrong_shape_is_a_failed_row_per_image_and_exit_2(server, images, tmp_path):
    (tmp_path / "mine.py").write_text(WRONG_SHAPE_FILE)
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "r", "--no-isolate",
                     "--reference", f"{tmp_path / 'mine.py'}:preprocess")
    assert "Traceback" not in result.stderr and result.returncode == 2, result.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["compared"] == 0 and len(report["failed"]) == len(FEW)
    assert all("made a [3, 100, 100] model input; the classifier takes [3, 224, 224]" in f["reason"]
               for f in report["failed"])


def test_top_k_other_than_5_fills_the_csv(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path, "--no-isolate", "--top-k", "3")
    assert result.returncode == 0, result.stderr
    with (tmp_path / "per_image.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(FEW) and all(0 < float(row["topk_overlap"]) <= 1 for row in rows)
    assert "mean top-3 overlap" in result.stdout
