"""What `harness deploy --no-check` writes and refuses, without a server: the production profile
validated as this repository's own is (configs through Triton's schema, the DALI pipelines against
DALI 2.1.1, the engine build command, the compose file with the real Compose binary), the user's
model conformed to the classifier contract, and nothing written where it cannot be deployed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import compose
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from harness.engine_input import read_engine_input
from harness.model import check_onnx, conform_onnx, load_for_tensorrt, onnx_session, read_classifier
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.repository import load_config, load_repository
from harness.spec import load_spec
from tests.commands import harness
from tests.deploy.classifiers import SIZE, thirty_seven_classes

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
    assert builder == {"/models": out.resolve()}  # nothing of the checkout: both images are built from the folder
    for service, dockerfile in (("engine-builder", "engine.Dockerfile"), ("triton", "Dockerfile")):
        build = services[service]["build"]
        assert (Path(build["context"]), build["dockerfile"]) == (out.resolve(), dockerfile)
        assert (out / dockerfile).is_file()
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
    (f"{DEFINITIONS / 'training.py'}:with_lambda", "Lambda(<lambda>): no spec operation holds it"),
    (f"{DEFINITIONS / 'training.py'}:augmented", "RandomResizedCrop is random"),
    ("torchvision:ViT_L_16_Weights.IMAGENET1K_SWAG_E2E_V1", "takes 224x224 images; torchvision:ViT_L_16"),
])
def test_what_cannot_be_deployed_is_refused_by_name_and_nothing_is_written(tmp_path, reference, message):
    result = harness("deploy", ONNX, "--reference", reference, "--out", tmp_path / "out", "--no-check")
    assert result.returncode == 2 and message in " ".join(result.stderr.split()), result.stderr
    assert not (tmp_path / "out").exists()


def test_openai_clips_transform_is_deployed_its_rgb_conversion_read_as_the_decode(tmp_path):
    """CLIP's Compose holds a plain function (``_convert_image_to_rgb``) between CenterCrop and ToTensor."""
    out = tmp_path / "out"
    result = harness("deploy", ONNX, "--reference", f"{DEFINITIONS / 'training.py'}:openai_clip", "--out", out, "--no-check")
    assert result.returncode == 0, result.stdout + result.stderr
    header = (out / "preprocessing.toml").read_text().splitlines()[0]
    assert "_convert_image_to_rgb read as the decode's RGB output (it is PIL's convert(\"RGB\") on images of every mode" \
        in header
    assert load_spec(out / "preprocessing.toml").preprocess.normalize.mean[0] == 0.48145466


def test_a_folder_it_did_not_write_is_never_replaced(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", tmp_path,
                     "--no-check")
    assert result.returncode == 2 and "did not write" in result.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep"


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every file's bytes and every link's target under ``folder`` (links not followed)."""
    return {str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "folder"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def earlier(vit, tmp_path):
    """A deployment deploy wrote earlier (the module's, copied: its record with it)."""
    out = tmp_path / "deployment"
    shutil.copytree(vit[0], out, symlinks=True)
    return out


def test_a_forged_marker_does_not_make_a_users_folder_replaceable(tmp_path):
    """The first line deploy writes in its spec, forged, once got a user's folder deleted (exit 0)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "thesis.tex").write_text("\\chapter{Results}")
    (tmp_path / "preprocessing.toml").write_text("# Written by `harness deploy`\n")
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", tmp_path,
                     "--no-check")
    assert result.returncode == 2 and "holds preprocessing.toml, which the harness did not write" in result.stderr
    assert (tmp_path / "src" / "thesis.tex").read_text() == "\\chapter{Results}"


def test_what_the_user_added_to_a_deployment_is_named_and_nothing_is_lost(earlier):
    (earlier / "NOTES.md").write_text("why this model\n")
    (earlier / "my_model" / "1").mkdir(parents=True)
    (earlier / "my_model" / "config.pbtxt").write_text('name: "my_model"\n')
    before = tree(earlier)
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", earlier,
                     "--no-check")
    assert result.returncode == 2 and "holds NOTES.md, which the harness did not write" in result.stderr, result.stderr
    assert tree(earlier) == before
    (earlier / "NOTES.md").unlink()
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", earlier,
                     "--no-check")
    assert result.returncode == 2 and "holds my_model, which the harness did not write" in result.stderr
    assert (earlier / "my_model" / "config.pbtxt").is_file()


def test_a_refused_redeploy_leaves_the_earlier_deployment_byte_identical(earlier, tmp_path):
    """Class names are read and checked before anything is written; nothing is left beside it either."""
    before = tree(earlier)
    (tmp_path / "three.txt").write_text("a\nb\nc\n")
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", earlier,
                     "--no-check", "--class-names", tmp_path / "three.txt")
    assert result.returncode == 2 and "3 names, the model gives 1000 scores" in result.stderr, result.stderr
    assert tree(earlier) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deployment", "three.txt"]


def test_a_deployment_changed_since_it_was_written_is_not_replaced(earlier):
    config = earlier / "classifier" / "config.pbtxt"
    config.write_text(config.read_text() + "# my tuning\n")
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", earlier,
                     "--no-check")
    assert result.returncode == 2 and "classifier/config.pbtxt changed since harness deploy wrote it" in result.stderr
    assert config.read_text().endswith("# my tuning\n")


def test_a_link_to_an_earlier_deployment_is_redeployed_through(earlier, tmp_path):
    """--out a symbolic link (it ended in an OSError traceback): its target is replaced, the link kept."""
    link = tmp_path / "current"
    link.symlink_to(earlier.name)
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", link,
                     "--no-check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert link.is_symlink() and os.readlink(link) == earlier.name
    assert load_spec(earlier / "preprocessing.toml").preprocess.resize.mode == "shorter_side"  # the ViT's was a stretch
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current", "deployment"]


@pytest.mark.parametrize("inside", ["zz_mine", "classifier/1"])
def test_out_inside_this_projects_repository_is_refused(inside):
    out = DEFAULT_REPOSITORY / inside
    existed = out.exists()
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out", out,
                     "--no-check")
    assert result.returncode == 2 and "this project's own model repository" in result.stderr
    assert out.exists() == existed and not list(DEFAULT_REPOSITORY.glob(".*.harness-*"))


CROP256 = f"{DEFINITIONS / 'training.py'}:crop256"


def test_an_ir_14_model_of_37_classes_and_a_256_crop_is_lowered_and_planned_by_the_engine_builder(tmp_path, photos_dir):
    """As onnx 1.23 saves it (IR version 14): TensorRT 11.0's parser and the pinned ONNX Runtime read 13 at
    most ("Unsupported model IR version: 14"), and nothing in the graph needs 14, so deploy lowers it; the
    engine builder plans the 256-pixel input and the configs hold 37 classes."""
    model, names = thirty_seven_classes(tmp_path / "user", ir_version=14)
    out = tmp_path / "deployment"
    result = harness("deploy", model, "--reference", CROP256, "--out", out, "--no-check", "--class-names", names)
    printed = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "IR version 13, opset 13, lowered from IR version 14" in printed
    assert {"--minShapes=input:1x3x256x256", "--optShapes=input:8x3x256x256", "--maxShapes=input:64x3x256x256"} <= set(
        printed.split())  # the engine builder's dry run
    assert read_engine_input(out / "classifier").dims == (3, 256, 256)
    configs = load_repository(out)
    assert [list(o.dims) for o in configs["classifier"].output] == [[37], [37]]
    assert [list(o.dims) for o in configs["classify_dali"].output if o.name in ("LOGITS", "PROBABILITIES")] == [[37], [37]]
    assert (out / "classifier" / "labels.txt").read_text() == names.read_text()
    deployed = onnx.load(str(out / "classifier" / "model.onnx"), load_external_data=False)
    assert deployed.ir_version == 13
    # the lowered model answers as the model does: its IR-7 twin (the same graph), on a photo, in ONNX Runtime
    image = Image.open(photos_dir / "grace_hopper.jpg").convert("RGB").resize((SIZE, SIZE))
    pixels = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    twin, _ = thirty_seven_classes(tmp_path / "twin")
    (expected,) = onnx_session(twin).run(["scores"], {"pixel_values": pixels[None]})
    (logits,) = onnx_session(out / "classifier" / "model.onnx").run(["logits"], {"input": pixels.transpose(2, 0, 1)[None]})
    assert logits.shape == (1, 37) and np.array_equal(logits, expected)


def test_an_onnx_the_production_parser_cannot_read_is_refused_with_its_limit(tmp_path):
    model, names = thirty_seven_classes(tmp_path / "user", ir_version=14, opset=25)
    result = harness("deploy", model, "--reference", CROP256, "--out", tmp_path / "out", "--no-check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "opset 25: TensorRT 11.0.0's ONNX parser (ONNX 1.20.0) reads opsets 9 to 24" in " ".join(result.stderr.split())
    assert "opset_version=24" in result.stderr and not (tmp_path / "out").exists()
    (tmp_path / "broken.onnx").write_bytes(model.read_bytes()[: 1000])
    result = harness("deploy", tmp_path / "broken.onnx", "--reference", CROP256, "--out", tmp_path / "out", "--no-check")
    assert result.returncode == 2 and "not an ONNX model" in result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_a_float16_model_is_fed_and_read_in_float32(tmp_path, photos_dir):
    """fp16 inside and at its input and scores (a half-precision export): the served input stays float32 (what
    the DALI pipeline makes), cast to float16 after the layout's Transpose; its scores are cast to float32."""
    model, _ = thirty_seven_classes(tmp_path / "user", fp16=True)
    found = read_classifier(model)
    assert (found.layout, found.dtype, found.output_dtype, found.classes) == ("NHWC", "float16", "float16", 37)
    conform_onnx(model, tmp_path / "model.onnx", (SIZE, SIZE), load_for_tensorrt(model).model)
    check_onnx(tmp_path / "model.onnx", (SIZE, SIZE))  # float32 `input`, `logits`, `probabilities`
    image = Image.open(photos_dir / "grace_hopper.jpg").convert("RGB").resize((SIZE, SIZE))
    pixels = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    twin, _ = thirty_seven_classes(tmp_path / "fp32")
    (expected,) = onnx_session(twin).run(["scores"], {"pixel_values": pixels[None]})
    logits, probabilities = onnx_session(tmp_path / "model.onnx").run(["logits", "probabilities"],
                                                                     {"input": pixels.transpose(2, 0, 1)[None]})
    assert logits.dtype == probabilities.dtype == np.float32 and logits.argmax() == expected.argmax()
    assert np.abs(logits - expected).max() < 0.05 and abs(probabilities.sum() - 1) < 1e-5


def test_another_triton_release_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    """The manifest knows 26.06's DALI and TensorRT only: a deployment for 25.08 cannot be proven (or built) here."""
    result = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out",
                     tmp_path / "out", "--no-check", "--triton-release", "25.08")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: --triton-release 25.08: deploy/versions.toml knows Triton 26.06 only "
                                    "(DALI 2.1.1, TensorRT 11.0.0)") and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    same = harness("deploy", ONNX, "--reference", "torchvision:ResNet50_Weights.IMAGENET1K_V2", "--out",
                   tmp_path / "out", "--no-check", "--triton-release", "26.06", "--name", "lite")
    assert same.returncode == 0, same.stdout + same.stderr
    assert json.loads((tmp_path / "out" / "lite.deployment.json").read_text())["release"] == "26.06"
