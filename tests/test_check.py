"""`harness check` end to end against the real embedded server, on real photos."""

import json
import math
import shutil
import threading

import numpy as np
import pytest

from harness.check import ImageChecker, run_check
from harness.client import TritonClient
from harness.compare.ties import default_tie_margin
from harness.compare.tolerance import tolerances_for
from harness.corpus import list_images
from harness.deployment import DeployedSide, TapsDeployment
from harness.reference import load_recipe
from harness.reference.model import OnnxModel
from harness.server import TritonServer, free_port
from harness.spec import load_spec
from harness.task import get_task
from tests.conftest import DALI_CHECK_MODELS, copy_photos

FEW = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "rocket.jpg", "grace_hopper.jpg"]


@pytest.fixture(scope="module")
def few_photos(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("few"))


@pytest.fixture(scope="module")
def reference_model(repository):
    return OnnxModel(repository / "classifier" / "model.onnx")


def checker_for(server, spec, reference_model, pipeline="dali", reference=None, retries=3):
    url = server.grpc_url
    side = DeployedSide(TapsDeployment(pipeline, get_task(None), spec.preprocess), lambda: TritonClient(url, "grpc"), retries)
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    return ImageChecker(side, load_recipe(spec, reference), reference_model, tolerances,
                        tie_margin=default_tie_margin(tolerances))


@pytest.mark.parametrize("pipeline", ["dali", "opencv"])
def test_aligned_spec(server, spec, reference_model, few_photos, tmp_path, pipeline):
    images = sorted(few_photos.iterdir())
    outcome = run_check(images, checker_for(server, spec, reference_model, pipeline), tmp_path)
    report = outcome.summary.result().to_dict()
    assert report["images"] == report["compared"] == len(images) and not report["failed"]
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["decode", "resize", "crop", "input", "output", "topk"]
    assert stages["decode"]["verdict"] == "equal"  # one libjpeg-turbo on both sides, on the CPU
    if pipeline == "opencv":  # the served OpenCV model is the reference's own code
        assert all(stages[s]["verdict"] == "equal" for s in ("resize", "crop", "input"))
    for s in report["stages"]:
        assert s["verdict"] in ("equal", "close"), s
        for name, stats in s["metrics"].items():
            finite = math.isfinite(stats["worst"]) or name in ("psnr_db", "sqnr_db")  # inf dB: identical
            assert not math.isnan(stats["worst"]) and finite, (s["name"], name)
    assert stages["topk"]["metrics"]["top1_agree"]["mean"] == 1.0
    assert report["first_divergent_stage"] is None
    lines = (tmp_path / "images.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["image"] for line in lines) == sorted(p.name for p in images)


def test_misaligned_resize_is_found_and_isolated(server, repository, reference_model, few_photos, tmp_path):
    spec = load_spec(repository.parent / "specs" / "misaligned_resize.toml")
    outcome = run_check(sorted(few_photos.iterdir()), checker_for(server, spec, reference_model), tmp_path)
    report = outcome.summary.result().to_dict()
    stages = {s["name"]: s for s in report["stages"]}
    assert report["first_divergent_stage"] == "resize"
    assert stages["decode"]["verdict"] == "equal"
    assert stages["resize"]["verdict"] == "diverged" and stages["resize"]["isolated_verdict"] == "diverged"
    # normalization adds nothing by itself: fed the reference crop, DALI matches torchvision
    assert stages["input"]["isolated_verdict"] in ("equal", "close")
    assert stages["output"]["metrics"]["max_abs"]["worst"] > 0.5


def test_a_corrupt_file_is_a_failed_row_and_the_rest_are_compared(server, spec, reference_model, few_photos, tmp_path):
    images_dir = tmp_path / "images"
    shutil.copytree(few_photos, images_dir)
    data = (images_dir / "baboon.jpg").read_bytes()
    (images_dir / "cut.jpg").write_bytes(data[: len(data) // 3])
    (images_dir / "readme.txt").write_text("these are test photos\n")
    images = sorted(images_dir.iterdir())
    report = run_check(images, checker_for(server, spec, reference_model), tmp_path / "report").summary.result().to_dict()
    failed = {f["image"]: f["reason"] for f in report["failed"]}
    assert set(failed) == {"cut.jpg", "readme.txt"}
    assert "truncated JPEG" in failed["cut.jpg"] and "not an image" in failed["readme.txt"]
    assert report["compared"] == len(FEW) and report["images"] == len(images)


COMPOSE_FILE = """
from torchvision import transforms as T
# (x - 127) / 128 on 0-255 pixels, written the torchvision way
val_transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                           T.Normalize([127 / 255] * 3, [128 / 255] * 3)])
"""

CALLABLE_FILE = """
import cv2, numpy as np
def preprocess(data: bytes):
    rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    h, w = rgb.shape[:2]
    s = 256 / min(h, w)
    rgb = cv2.resize(rgb, (int(w * s + 0.5), int(h * s + 0.5)), interpolation=cv2.INTER_LINEAR)
    top, left = int((rgb.shape[0] - 224) / 2 + 0.5), int((rgb.shape[1] - 224) / 2 + 0.5)
    crop = rgb[top:top + 224, left:left + 224].astype(np.float32)
    return ((crop - 127) / 128).transpose(2, 0, 1)
"""


def test_compose_reference_captures_each_transform(server, spec, reference_model, few_photos, tmp_path):
    (tmp_path / "train.py").write_text(COMPOSE_FILE)
    checker = checker_for(server, spec, reference_model, reference=f"{tmp_path / 'train.py'}:val_transform")
    report = run_check(sorted(few_photos.iterdir()), checker, tmp_path / "r").summary.result().to_dict()
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["decode", "resize", "crop", "input", "output", "topk"]
    assert stages["decode"]["verdict"] == "equal"
    assert report["first_divergent_stage"] == "resize"  # PIL's antialiased resize vs DALI's plain one


def test_callable_reference_returning_only_the_input(server, spec, reference_model, few_photos, tmp_path):
    (tmp_path / "mine.py").write_text(CALLABLE_FILE)
    checker = checker_for(server, spec, reference_model, reference=f"{tmp_path / 'mine.py'}:preprocess")
    report = run_check(sorted(few_photos.iterdir()), checker, tmp_path / "r").summary.result().to_dict()
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["input", "output", "topk"]  # only the input onward is compared
    assert stages["input"]["verdict"] == "close" and stages["topk"]["metrics"]["top1_agree"]["mean"] == 1.0


def test_server_stopping_mid_run_keeps_the_work_and_resume_finishes_it(cpu_repository, spec, reference_model,
                                                                       photos_dir, tmp_path):
    images = list_images(photos_dir)[:12]
    ports = dict(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    server = TritonServer(cpu_repository, log_file=tmp_path / "t1.log", models=DALI_CHECK_MODELS, **ports).start()
    seen = []

    def stop_after_three(result):
        seen.append(result.image)
        if len(seen) == 3:
            threading.Thread(target=server.stop).start()

    try:
        first = run_check(images, checker_for(server, spec, reference_model, retries=1), tmp_path / "r",
                          on_result=stop_after_three)
    finally:
        server.stop()
    assert first.stopped is not None and "stopped answering at image" in str(first.stopped)
    assert server.grpc_url in str(first.stopped)
    done = [json.loads(line)["image"] for line in (tmp_path / "r" / "images.jsonl").read_text().splitlines()]
    assert 3 <= len(done) < len(images)

    with TritonServer(cpu_repository, log_file=tmp_path / "t2.log", models=DALI_CHECK_MODELS, **ports) as again:
        redone = []
        second = run_check(images, checker_for(again, spec, reference_model), tmp_path / "r", resume=True,
                           on_result=redone.append)
    assert second.stopped is None
    report = second.summary.result().to_dict()
    assert report["images"] == report["compared"] == len(images)
    lines = (tmp_path / "r" / "images.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["image"] for line in lines) == sorted(p.name for p in images)  # none twice
    assert len(redone) == len(images)  # resumed ones are re-read, not recomputed


def test_saved_tensors_round_trip(server, spec, reference_model, few_photos, tmp_path):
    from harness.check import load_image_tensors
    from harness.check.files import saved_image_name, tensors_path

    run_check(sorted(few_photos.iterdir())[:2], checker_for(server, spec, reference_model), tmp_path, save_tensors=True)
    path = tensors_path(tmp_path / "tensors", "baboon.jpg")
    assert path.name.startswith("baboon.jpg.") and saved_image_name(path) == "baboon.jpg"
    saved = load_image_tensors(path)
    assert set(saved.reference) >= {"decode", "resize", "crop", "input", "output"}
    assert saved.deployed["decode"].dtype == np.uint8 and saved.deployed["input"].shape == (3, 224, 224)
