"""The fuzz campaign on deploy's inputs (issue 54): hostile ONNX files, seeded hostile Hugging
Face and timm configs, malformed references. Each is refused in one line, exit 2, before
anything is written; never a traceback (a DecodeError, a ValidationError, a ValueError, a
TypeError ended deploy with exit 1, "a divergence was found"). No server: every refusal comes
before deploy serves anything; the configs are read as deploy reads them (read and required)."""

import json
import random

import pytest

from harness.errors import HarnessError
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.reference.reading import read_source
from tests.commands import harness
from tests.fuzz_files import HF_KEYS, HOSTILE_REFERENCES, TIMM_KEYS, hostile_framework_config, hostile_models

SEED = 20261206
ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
DEFINITIONS = PROJECT_ROOT / "tests" / "reference" / "definitions"
PRESET = "torchvision:ResNet50_Weights.IMAGENET1K_V2"


def deploy(tmp_path, model, reference=PRESET):
    """``harness deploy --no-check`` in this process: (exit status, stderr, whether --out was made)."""
    out = tmp_path / "out"
    result = harness("deploy", model, "--reference", reference, "--out", out, "--no-check")
    return result.returncode, result.stderr, out.exists()


def assert_refused(status, err, written, what):
    lines = err.strip().splitlines()
    assert "Traceback" not in err and status == 2, (what, status, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error:"), (what, err[-2000:])
    assert not written, f"{what}: refused, yet --out was written"


def test_the_issues_four_deploy_inputs_are_refused_in_one_line(tmp_path):
    models = hostile_models(ONNX, tmp_path, SEED)
    nan = tmp_path / "nan"
    nan.mkdir()
    config = json.loads((DEFINITIONS / "vit" / "preprocessor_config.json").read_text())
    (nan / "preprocessor_config.json").write_text(json.dumps({**config, "size": {"height": float("nan"), "width": 224}}))
    for model, reference, message in ((models["garbage"], PRESET, "not an ONNX model (protobuf cannot parse it)"),
                                      (models["outside"], PRESET, "outside the model's folder: refused"),
                                      (ONNX, f"hf:{nan}", "size.height must be a whole number, got nan"),
                                      (ONNX, "torchvision:resnet50.DEFAULT", "torchvision has no weights 'resnet50.DEFAULT'")):
        status, err, written = deploy(tmp_path, model, reference)
        assert_refused(status, err, written, reference)
        assert message in " ".join(err.split()), err


def test_every_hostile_model_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "fuzz").mkdir()
    models = hostile_models(ONNX, tmp_path / "fuzz", SEED)
    assert len(models) >= 12
    for kind, model in models.items():
        assert_refused(*deploy(tmp_path, model), kind)


@pytest.mark.parametrize("reference", HOSTILE_REFERENCES, ids=range(len(HOSTILE_REFERENCES)))
def test_a_malformed_reference_is_refused_in_one_line(tmp_path, reference):
    assert_refused(*deploy(tmp_path, ONNX, reference), reference)


@pytest.mark.parametrize("framework, file, keys", [("hf", DEFINITIONS / "vit" / "preprocessor_config.json", HF_KEYS),
                                                   ("timm", DEFINITIONS / "convnext" / "config.json", TIMM_KEYS)])
def test_hostile_framework_configs_are_read_or_refused_in_one_line(tmp_path, framework, file, keys):
    """60 seeded configs of each framework, read as deploy reads them: a reading, or one refusal."""
    rng, outcomes = random.Random(SEED), {"read": 0, "refused": 0}
    original = json.loads(file.read_text())
    for case in range(60):
        folder = tmp_path / str(case)
        folder.mkdir()
        if framework == "hf":
            config = hostile_framework_config(rng, original, keys)
        else:
            config = {**original, "pretrained_cfg": hostile_framework_config(rng, original["pretrained_cfg"], keys)}
        (folder / file.name).write_text(json.dumps(config))
        try:
            read_source(f"{framework}:{folder}").require().preprocess
        except HarnessError as exc:
            assert "\n" not in str(exc).strip(), (config, str(exc))
            outcomes["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - the campaign's finding: a crash, not a refusal
            pytest.fail(f"{framework} config {config}: {type(exc).__name__}: {exc}")
        else:
            outcomes["read"] += 1
    assert outcomes["refused"] >= 20, outcomes
