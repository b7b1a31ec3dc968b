"""harness layers and the fp32 fallback on the real EfficientNet-Lite0 and real photos, with
faults planted by the tests themselves (tests/layers/planted.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from harness.cli import main
from harness.layers.executions import LayerGraph
from harness.layers.fallback import _fp16_run
from harness.model import LOGITS, ONNX_FILENAME
from harness.session import Session
from tests.layers.planted import FC, SCALE_DOWN, fp16_fragile_head, overflow_exponents, perturbed_weights

IMAGES = 12
FEATURES = "/net/Reshape_output_0"  # the Gemm's input: pooled features


@pytest.fixture(scope="module")
def fp32(repository):
    return repository / "classifier" / ONNX_FILENAME


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    """The first photos of the corpus, in a directory of their own."""
    out = tmp_path_factory.mktemp("photos")
    for p in sorted(photos_dir.iterdir())[:IMAGES]:
        shutil.copy(p, out / p.name)
    return out


@pytest.fixture(scope="module")
def inputs(images, repository):
    recipe = Session(repository).recipe()
    return np.stack([recipe(p.read_bytes())["input"] for p in sorted(images.iterdir())])


@pytest.fixture(scope="module")
def planted(fp32, inputs, tmp_path_factory):
    """The classifier with an fp16 overflow planted around its Gemm; exponents measured on the photos."""
    model = onnx.load(str(fp32))
    model.graph.output.append(onnx.helper.make_tensor_value_info(FEATURES, onnx.TensorProto.FLOAT, None))
    logits, features = ort.InferenceSession(model.SerializeToString()).run([LOGITS, FEATURES], {"input": inputs})
    fc = next(n for n in model.graph.node if n.name == FC)
    weights = next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == fc.input[1])
    up, scaled = overflow_exponents(float(features.max()), float(np.abs(logits).max(1).min()), float(np.abs(weights).max()))
    out = fp16_fragile_head(fp32, tmp_path_factory.mktemp("planted") / "planted.onnx", up, scaled)
    planted_logits = ort.InferenceSession(str(out)).run([LOGITS], {"input": inputs})[0]
    assert np.array_equal(planted_logits, logits)  # exact in fp32: only fp16 can tell
    return out


def layers(images, report, *args):
    status = main(["layers", str(images), "--report", str(report), *args])
    return status, json.loads((report / "layers.json").read_text()) if (report / "layers.json").exists() else None


def test_planted_fp16_overflow_is_the_first_divergent_layer(planted, images, tmp_path):
    status, result = layers(images, tmp_path, "--onnx", str(planted), "--executions", "onnx,onnx-fp16")
    assert status == 1
    assert result["first_divergent_layer"] == FC
    (pair,) = result["pairs"]
    rows = {r["node"]: r for r in pair["layers"]}
    assert rows[FC]["inf"] > 0 and rows[FC]["verdict"] == "diverged"
    before = [r for r in pair["layers"] if r["depth"] < rows[FC]["depth"]]
    assert before and all(r["verdict"] != "diverged" for r in before)
    for kind in ("md", "html", "csv", "png"):
        assert (tmp_path / f"layers.{kind}").stat().st_size > 0
    assert FC in (tmp_path / "layers.md").read_text()


def test_fallback_keeps_exactly_the_planted_region_in_fp32(planted, images, inputs, tmp_path, capsys):
    out = tmp_path / "planted_fp16.onnx"
    status = main(["model", "export", "--fp16", "--onnx", str(planted), "--calibration", str(images), "--out", str(out)])
    assert status == 0
    listed = json.loads(out.with_suffix(".json").read_text())
    assert listed["fp32_layers"] == [FC, SCALE_DOWN]
    assert f"{FC}, {SCALE_DOWN}" in "".join(capsys.readouterr())
    fp32_logits = ort.InferenceSession(str(planted)).run([LOGITS], {"input": inputs})[0]
    logits, overflowing = _fp16_run(out, LayerGraph.from_onnx(planted), inputs)
    assert overflowing == []
    assert np.array_equal(logits.argmax(1), fp32_logits.argmax(1))
    # and without the fallback the same conversion overflows: the search was needed
    from harness.precision import export_fp16

    _, plain_overflowing = _fp16_run(export_fp16(planted, tmp_path / "plain.onnx"), LayerGraph.from_onnx(planted), inputs)
    assert FC in plain_overflowing


def test_real_model_fp16_is_safe_as_it_is(fp32, images, tmp_path, capsys):
    out = tmp_path / "model_fp16.onnx"
    assert main(["model", "export", "--fp16", "--onnx", str(fp32), "--calibration", str(images), "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["fp32_layers"] == []
    assert "none: fp16 is safe as it is" in "".join(capsys.readouterr())


def test_perturbed_layer_found_between_torch_and_onnx(fp32, images, tmp_path):
    target = "/net/_blocks.8/_project_conv/Conv"
    broken = perturbed_weights(fp32, tmp_path / "broken.onnx", target, 1.25)
    status, result = layers(images, tmp_path / "report", "--onnx", str(broken), "--executions", "torch,onnx")
    assert status == 1
    assert result["first_divergent_layer"] == target


def test_real_model_torch_onnx_noopt_and_fp16(fp32, images, tmp_path):
    status, result = layers(images, tmp_path, "--onnx", str(fp32), "--executions", "onnx,torch,onnx-noopt,onnx-fp16")
    assert status == 0 and result["first_divergent_layer"] is None
    pairs = {p["execution"]: p for p in result["pairs"]}
    for name in ("torch", "onnx-noopt"):  # the same model in float32: close, to a few ulps
        worst = max(r["rel_rms"] for r in pairs[name]["layers"])
        assert 0 < worst < 1e-4, (name, worst)
        assert pairs[name]["top1_agreement"] == 1.0
    # torch has no node for the softmax wrapper and the inline flatten: listed, not dropped
    assert set(pairs["torch"]["unmatched"]) == {"/Softmax", "/net/Reshape"}
    fp16 = pairs["onnx-fp16"]
    assert fp16["verdict"] == "close" and fp16["growth"] > 1  # fp16's error grows with depth
    first = next(r for r in fp16["layers"] if r["rel_rms"] > 0)
    assert max(r["rel_rms"] for r in fp16["layers"]) > first["rel_rms"]


@pytest.mark.parametrize("case", ["not-onnx", "unknown-layer", "no-image", "unknown-execution", "torchscript"])
def test_bad_input_is_one_line_and_exit_2(case, fp32, images, tmp_path, capsys):
    args = ["--onnx", str(fp32), "--executions", "onnx,onnx-noopt"]
    if case == "not-onnx":
        bogus = tmp_path / "model.onnx"
        bogus.write_bytes(b"\x89PNG not a model at all" * 10)
        args = ["--onnx", str(bogus), "--executions", "onnx,onnx-noopt"]
    elif case == "unknown-layer":
        args += ["--layers", "/net/_blocks.99/Conv"]
    elif case == "unknown-execution":
        args = ["--onnx", str(fp32), "--executions", "onnx,tflite"]
    elif case == "torchscript":  # a real TorchScript archive: torch refuses hooks on its modules
        import torch

        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(tmp_path / "model.pt"))
        args = ["--onnx", str(fp32), "--executions", "onnx,torch", "--torch-model", str(tmp_path / "model.pt")]
    if case == "no-image":
        empty = tmp_path / "empty"
        empty.mkdir()
        (empty / "notes.txt").write_text("not an image")
        images = empty
    status, result = layers(images, tmp_path / "report", *args)
    out = "".join(capsys.readouterr())
    assert status == 2 and result is None
    assert out.startswith("error:") and "Traceback" not in out
    assert out.count("error:") == 1 and len(out.strip().splitlines()) <= 4  # one message (rich wraps long paths)


def test_users_torch_module_matched_to_its_own_export(images, tmp_path):
    """A user's module exported directly (no wrapper, so no `net` scope), given as file.py:factory."""
    import torch

    from harness.model import INPUT_NAME, load_torch_model

    onnx_path = tmp_path / "user.onnx"
    torch.onnx.export(load_torch_model(), (torch.zeros(1, 3, 224, 224),), str(onnx_path), input_names=[INPUT_NAME],
                      output_names=[LOGITS], dynamic_axes={INPUT_NAME: {0: "batch"}, LOGITS: {0: "batch"}},
                      opset_version=13, dynamo=False)
    factory = tmp_path / "user_model.py"
    factory.write_text("from harness.model import load_torch_model\n\n\ndef build():\n    return load_torch_model()\n")
    status, result = layers(images, tmp_path / "report", "--onnx", str(onnx_path), "--executions", "onnx,torch",
                            "--torch-model", f"{factory}:build")
    assert status == 0 and result["first_divergent_layer"] is None
    (pair,) = result["pairs"]
    every_layer = LayerGraph.from_onnx(onnx_path).nodes
    assert len(every_layer) > 90 and pair["unmatched"] == ["/Reshape"]  # the inline flatten has no module
    assert [row["node"] for row in pair["layers"]] == [n for n in every_layer if n != "/Reshape"]
    assert pair["top1_agreement"] == 1.0


def test_saved_check_tensors_are_model_inputs(fp32, images, inputs, tmp_path):
    """`check --save-tensors` files (.npz) give the same comparison as the images they came from."""
    from harness.check.files import save_image_tensors
    from harness.check.image import ImageTensors

    saved = tmp_path / "tensors"
    saved.mkdir()
    for path, x in zip(sorted(images.iterdir()), inputs):
        tensors = ImageTensors()
        tensors.reference["input"] = x
        save_image_tensors(saved / f"{path.name}.npz", tensors)
    args = ("--onnx", str(fp32), "--executions", "onnx,onnx-noopt")
    _, from_images = layers(images, tmp_path / "a", *args)
    _, from_tensors = layers(saved, tmp_path / "b", *args)
    assert from_tensors["images"] == from_images["images"] == IMAGES
    def rows(result):
        return [(x["node"], x["max_abs"], x["rel_rms"]) for x in result["pairs"][0]["layers"]]

    assert rows(from_tensors) == rows(from_images)
