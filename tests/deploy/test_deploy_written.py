"""What `harness deploy --no-check` writes and refuses, without a server: the production profile
validated as this repository's own is (configs through Triton's schema, the DALI pipelines against
DALI 2.1.1, the engine build command, the compose file with the real Compose binary), the user's
model conformed to the classifier contract, and nothing written where it cannot be deployed."""

import json
import subprocess
import sys
from pathlib import Path

import compose
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness.model import conform_onnx, onnx_session, read_classifier
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.repository import load_config, load_repository
from harness.spec import load_spec
from tests.commands import harness

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
LABELS = DEFAULT_REPOSITORY / "classifier" / "labels.txt"
DEFINITIONS = PROJECT_ROOT / "tests" / "reference" / "definitions"
COMPOSE = Path(compose.__file__).parent / "docker-compose"
MODELS = ["classifier", "classify_dali", "preprocess_dali", "preprocess_dali_stages", "preprocess_dali_taps",
          "validate_image"]


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    out = tmp_path_factory.mktemp("vit") / "deployment"
    result = harness("deploy", ONNX, "--reference", f"hf:{DEFINITIONS / 'vit'}", "--out", out, "--no-check",
                     "--class-names", LABELS)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result.stdout


def test_the_repository_is_this_projects_classification_models_reading_the_definition(vit):
    out, printed = vit
    assert sorted(load_repository(out)) == MODELS
    spec = load_spec(out / "preprocessing.toml")
    resize, normalize = spec.preprocess.resize, spec.preprocess.normalize
    assert (resize.mode, resize.size, resize.interpolation, resize.antialias, resize.resampling) == \
        ("stretch", (224, 224), "linear", True, "pil")  # size {height, width}, resample 2: PIL's bilinear
    assert spec.preprocess.crop.size == (224, 224) and spec.preprocess.input.channel_order == "RGB"
    assert (normalize.pixel_range, normalize.mean, normalize.std) == (1.0, (0.5,) * 3, (0.5,) * 3)  # rescale 1/255
    assert spec.reference.recipe == "torch"  # transformers 5's default backend: torchvision on uint8 tensors
    assert load_config(out / "classifier" / "config.pbtxt").platform == "tensorrt_plan"
    assert load_config(out / "classify_dali" / "config.pbtxt").dynamic_batching is not None
    assert (out / "classifier" / "labels.txt").read_text() == LABELS.read_text()
    assert "every operator argument in DALI 2.1.1's schema" in printed
    assert "--minShapes=input:1x3x224x224" in printed and "--noTF32" in printed  # the engine builder's dry run


def test_a_weights_presets_resize_and_normalization_are_written_as_it_defines_them(tmp_path):
    """Issue 59 item 8: the written spec itself, not only the served check, holds the definition:
    ResNet50_Weights.IMAGENET1K_V2.transforms() resizes the shorter side to 232 (bilinear, antialias),
    crops 224 (torchvision's half-to-even offsets) and normalizes by ImageNet's mean and std, in RGB
    order (a swapped mean passed every test but the served check)."""
    out = tmp_path / "preset"
    written = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", out,
                      "--no-check")
    assert written.returncode == 0, written.stdout + written.stderr
    spec = load_spec(out / "preprocessing.toml")
    resize, normalize = spec.preprocess.resize, spec.preprocess.normalize
    assert (resize.mode, resize.size, resize.interpolation, resize.antialias) == ("shorter_side", (232,), "linear", True)
    assert spec.preprocess.crop.size == (224, 224) and spec.preprocess.crop.offset_rounding == "half_even"
    assert normalize.pixel_range == 1.0 and spec.preprocess.input.channel_order == "RGB"
    assert normalize.mean == (0.485, 0.456, 0.406) and normalize.std == (0.229, 0.224, 0.225)
    assert spec.reference.recipe == "torchvision"


def test_its_compose_file_is_valid_for_compose_and_the_spec_schema(vit):
    out, _ = vit
    env = {"TRITON_ADMIN_KEY": "test-key", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([str(COMPOSE), "-f", str(out / "docker-compose.yml"), "config", "--format", "json"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    services = json.loads(run.stdout)["services"]
    loaded = [a.split("=", 1)[1] for a in services["triton"]["command"] if a.startswith("--load-model=")]
    assert sorted(loaded) == MODELS and services["triton"]["depends_on"]["engine-builder"]["condition"] == \
        "service_completed_successfully"
    builder = {v["target"]: Path(v["source"]) for v in services["engine-builder"]["volumes"] if v["type"] == "bind"}
    assert builder["/models"] == out.resolve() and (builder["/opt/project/docker"] / "build_engine.py").is_file()
    schema = subprocess.run([str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema",
                             "vendor.compose-spec", str(out / "docker-compose.yml")], capture_output=True, text=True,
                            timeout=120)
    assert schema.returncode == 0, schema.stdout + schema.stderr


def nhwc_model(path: Path) -> Path:
    """The project's classifier as another exporter writes it: input `pixel_values` NHWC, output `scores` only."""
    model = onnx.load(str(ONNX))
    graph = model.graph
    original = graph.input[0]
    graph.input.remove(original)
    graph.input.insert(0, helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["N", 224, 224, 3]))
    graph.node.insert(0, helper.make_node("Transpose", ["pixel_values"], [original.name], perm=[0, 3, 1, 2]))
    for output in list(graph.output):
        graph.output.remove(output)
        if output.name == "logits":
            graph.node.append(helper.make_node("Identity", ["logits"], ["scores"]))
            scores = onnx.ValueInfoProto()
            scores.CopyFrom(output)
            scores.name = "scores"
            graph.output.append(scores)
    onnx.save(model, str(path))
    return path


def test_a_model_of_another_layout_and_names_is_conformed_and_answers_the_same(tmp_path):
    found = read_classifier(nhwc_model(tmp_path / "nhwc.onnx"))
    assert (found.name, found.layout, found.size, found.output, found.classes) == ("pixel_values", "NHWC", (224, 224),
                                                                                   "scores", 1000)
    conform_onnx(tmp_path / "nhwc.onnx", tmp_path / "model.onnx", (224, 224))
    x = np.random.default_rng(0).random((2, 3, 224, 224), np.float32)
    (expected,) = onnx_session(ONNX).run(["logits"], {"input": x})
    logits, probabilities = onnx_session(tmp_path / "model.onnx").run(["logits", "probabilities"], {"input": x})
    assert np.array_equal(logits, expected) and np.allclose(probabilities.sum(1), 1)


@pytest.mark.parametrize("reference, message", [
    (f"{DEFINITIONS / 'training.py'}:with_lambda", "Lambda: no spec operation holds it"),
    (f"{DEFINITIONS / 'training.py'}:augmented", "RandomResizedCrop is random"),
    ("torchvision:ViT_L_16_Weights.IMAGENET1K_SWAG_E2E_V1", "takes 224x224 images; torchvision:ViT_L_16"),
])
def test_what_cannot_be_deployed_is_refused_by_name_and_nothing_is_written(tmp_path, reference, message):
    result = harness("deploy", ONNX, "--reference", reference, "--out", tmp_path / "out", "--no-check")
    assert result.returncode == 2 and message in " ".join(result.stderr.split()), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_it_did_not_write_is_never_replaced(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", tmp_path,
                     "--no-check")
    assert result.returncode == 2 and "did not write" in result.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep"
