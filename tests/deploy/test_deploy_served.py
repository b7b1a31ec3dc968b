"""`harness deploy` end to end on photos and training definitions of the tests' own (a CLIP-style
Compose, a ViTImageProcessor config, a timm model card's config, a torchvision weights preset), each
deployed for an ImageNet classifier (the project's EfficientNet-Lite0 ONNX playing the user's model),
served here (the cpu profile: the same DALI graph on DALI's CPU kernels), and checked: with the same
--reference it passes (exit 0), with a different training definition it fails (exit 1); and a classifier of
another shape (37 classes, a 256-pixel crop) deployed through to its served check."""

import contextlib
import json
import shutil

import numpy as np
import pytest

from harness.model import onnx_session
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from harness.written import verified
from tests.commands import harness
from tests.conftest import copy_photos
from tests.deploy.classifiers import another_version, thirty_seven_classes

pytestmark = pytest.mark.server  # each deployment is served by a server of its own

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
LABELS = DEFAULT_REPOSITORY / "classifier" / "labels.txt"
DEFINITIONS = PROJECT_ROOT / "tests" / "reference" / "definitions"
CLIP, VIT = f"{DEFINITIONS / 'training.py'}:clip", f"hf:{DEFINITIONS / 'vit'}"
TIMM, PRESET = f"timm:{DEFINITIONS / 'convnext'}", "torchvision:ResNet50_Weights.IMAGENET1K_V2"
CROP256 = f"{DEFINITIONS / 'training.py'}:crop256"
# sharp-edged drawings, where DALI's own cubic resize is 13-14 levels off PIL's, and photos of three aspects
PHOTOS = ["HappyFish.jpg", "LinuxLogo.jpg", "grace_hopper.jpg", "baboon.jpg"]


@pytest.fixture(scope="module")
def photos(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("photos"))


@contextlib.contextmanager
def served(out, work):
    server = TritonServer(build_cpu_profile(out, work / "cpu"), http_port=free_port(), grpc_port=free_port(),
                          metrics_port=free_port())
    with server:
        yield server


def check(photos, out, server, reference, report):
    return harness("check", photos, "--repository", out, "--url", server.grpc_url, "--reference", reference,
                   "--report", report)


def test_deploy_writes_serves_and_checks_a_clip_compose(photos, tmp_path):
    """The whole command: written, validated, served here and checked on the photos against the same
    Compose: every stage close (DALI replays PIL's bicubic within 2 levels), no top-1 changed."""
    out = tmp_path / "clip"
    result = harness("deploy", ONNX, "--reference", CLIP, "--out", out, "--images", photos, "--class-names", LABELS,
                     "--report", tmp_path / "report")
    printed = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"reference read from {CLIP} (torchvision Compose): replays your Compose exactly on 4 of 4 photos" in printed
    assert (result.stdout + result.stderr).count("replays your Compose exactly") == 1  # said once, not by check too
    assert "checked on 4 of 4 photos: the cpu profile (the same DALI graph on DALI's CPU decoder and kernels" in printed
    stages = {s["name"]: s for s in json.loads((tmp_path / "report" / "report.json").read_text())["stages"]}
    assert {"decode", "resize", "crop", "input", "output"} <= set(stages)  # the replay, proven exact, gives each stage
    assert stages["resize"]["verdict"] == "close" and stages["resize"]["metrics"]["max_abs"]["worst"] <= 2
    assert "what it costs: top-1 changed on 0 of 4 photos" in printed
    # The folder carries its proof: the check's report, linked from its README with its verdict, recorded as written.
    assert json.loads((out / "deployment.check.json").read_text())["stages"] == \
        json.loads((tmp_path / "report" / "report.json").read_text())["stages"]
    assert "| deployment | `classify_dali` | `classifier` | [No stage diverged.](deployment.check.md) |" in \
        (out / "README.md").read_text()
    assert verified(out) is not None  # every file of it the harness's, unchanged: a deploy may replace it again
    different = harness("check", photos, "--repository", out, "--reference", VIT, "--report", tmp_path / "vit")
    assert different.returncode == 1, different.stdout  # another training definition: the stretch diverges


# The torchvision preset deployed and checked: test_two_named_deployments_serve_side_by_side_from_a_folder_moved_away.
@pytest.mark.parametrize("deployed, other", [(VIT, CLIP), (TIMM, PRESET)], ids=["vit-config", "timm-config"])
def test_a_deployment_passes_its_own_definition_and_fails_another(photos, tmp_path, deployed, other):
    out = tmp_path / "deployment"
    written = harness("deploy", ONNX, "--reference", deployed, "--out", out, "--no-check")
    assert written.returncode == 0, written.stdout + written.stderr
    with served(out, tmp_path) as server:
        same = check(photos, out, server, deployed, tmp_path / "same")
        different = check(photos, out, server, other, tmp_path / "different")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "replays" in same.stdout and "exactly on 4 of 4 photos" in " ".join(same.stdout.split())
    assert different.returncode == 1, different.stdout + different.stderr


def test_a_37_class_model_with_a_256_pixel_crop_deploys_serves_and_checks(photos_dir, tmp_path):
    """Not the project's shape (issue 55): 37 classes with their names, a 256-pixel crop, an NHWC input of its
    own name. Written (the configs set through Triton's protobuf), planned by the engine builder, served here
    and checked on 3 photos against its training Compose."""
    model, names = thirty_seven_classes(tmp_path / "user")
    photos = copy_photos(photos_dir, ["grace_hopper.jpg", "baboon.jpg", "HappyFish.jpg"], tmp_path / "photos")
    result = harness("deploy", model, "--reference", CROP256, "--out", tmp_path / "out", "--images", photos,
                     "--class-names", names, "--report", tmp_path / "report")
    printed = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "37 classes)" in printed and "--minShapes=input:1x3x256x256" in printed
    assert "checked on 3 of 3 photos" in printed and "top-1 changed on 0 of 3 photos" in printed
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert {"decode", "resize", "crop", "input", "output"} <= {s["name"] for s in report["stages"]}


def test_two_named_deployments_serve_side_by_side_from_a_folder_moved_away(photos, tmp_path):
    """Issue 57's end: two deployments of their users' names in one folder, `lite` with a second version of its
    model (deployed again, the same preprocessing), the folder copied elsewhere and the original removed, the copy
    served by one server and each deployment checked there by its name (on 2 photos): each passes its own training
    definition (`lite` checked against its version 2, which its ensemble calls), and `other` (a stretch) fails
    `lite`'s; both versions of `lite_model` answer, each its own ONNX's scores."""
    written = tmp_path / "written"
    for name, reference, model in (("lite", PRESET, ONNX), ("other", VIT, ONNX),
                                   ("lite", PRESET, another_version(tmp_path / "v2"))):
        result = harness("deploy", model, "--reference", reference, "--out", written, "--no-check", "--name", name,
                         "--class-names", LABELS)
        assert result.returncode == 0, result.stdout + result.stderr
    moved = tmp_path / "elsewhere" / "deployments"
    shutil.copytree(written, moved, symlinks=True)
    shutil.rmtree(written)
    two = tmp_path / "two"
    two.mkdir()
    for photo in sorted(photos.iterdir())[:2]:
        shutil.copy(photo, two / photo.name)
    with served(moved, tmp_path) as server:
        runs = {(name, reference): harness("check", two, "--repository", moved, "--deployment", name, "--url",
                                           server.grpc_url, "--reference", reference, "--report",
                                           tmp_path / f"{name}-{reference.rpartition('/')[2]}")
                for name, reference in (("lite", PRESET), ("other", VIT), ("other", PRESET))}
        versions = {v: _answer(server, "lite_model", v) for v in ("1", "2")}
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    for version, onnx in (("1", moved / "lite_model" / "model.onnx"), ("2", moved / "lite_model" / "2" / "model.onnx")):
        expected = onnx_session(onnx, 1).run(["logits"], {"input": x})[0]
        assert np.abs(versions[version] - expected).max() < 1e-4, version
    assert versions["1"].argmax() != versions["2"].argmax()
    for (name, reference), run in runs.items():
        expected = 1 if (name, reference) == ("other", PRESET) else 0
        assert run.returncode == expected, (name, reference, run.stdout + run.stderr)
        assert "exactly on 2 of 2 photos" in " ".join(run.stdout.split())


def _answer(server, model: str, version: str) -> np.ndarray:
    """``model``'s logits for a seeded random input, from its ``version`` (Triton's version, asked by number)."""
    import tritonclient.grpc as grpcclient

    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return client.infer(model, [tensor], model_version=version).as_numpy("logits")
