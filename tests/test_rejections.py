"""One-sided rejection (issue 10): an image the training recipe decodes but the deployed
server rejects is a divergence of its own, counted apart, failing the run by default.

The real case: a 1-bit (bilevel) TIFF. OpenCV, the training recipe's decoder, reads it;
the deployed DALI decoder (cpu profile) fails on it (nvImageCodec failure)."""

import json

import pytest

from tests.commands import harness
from tests.conftest import copy_photos

BILEVEL = "bilevel.tif"


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    from PIL import Image

    directory = copy_photos(photos_dir, ("squirrel_cls.jpg", "baboon.jpg"), tmp_path_factory.mktemp("images"))
    Image.open(photos_dir / "fruits.jpg").convert("1").save(directory / BILEVEL)
    return directory


def test_an_image_only_the_server_rejects_fails_check(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path, "--no-isolate")
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    [rejected] = report["rejected"]["deployment"]
    assert rejected["image"] == BILEVEL and rejected["reason"].startswith("deployed: ")
    assert report["rejected"]["training"] == [] and report["failed"] == [] and report["compared"] == 2
    assert report["first_divergent_stage"] is None  # the compared images agree: the rejection alone fails it
    assert "**1 image rejected by deployment**" in result.stdout and "## Rejected by deployment only" in result.stdout
    with (tmp_path / "per_image.csv").open() as f:
        assert any(line.startswith(f"{BILEVEL},rejected by deployment,") for line in f)
    allowed = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "allowed", "--no-isolate",
                      "--allow-rejected")
    assert allowed.returncode == 0, allowed.stderr


def test_an_image_only_the_server_rejects_fails_accuracy(server, images, tmp_path):
    args = ("accuracy", images, "--url", server.grpc_url, "--reference-model", "onnx", "--pipeline", "dali")
    result = harness(*args, "--report", tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "accuracy.json").read_text())
    assert report["dataset"]["rejected"] == {"deployment": 1, "training": 0}
    assert report["failed"][0]["outcome"] == "rejected by deployment" and report["effect"]["paths"][1]["flips"] == 0
    assert harness(*args, "--report", tmp_path / "allowed", "--allow-rejected").returncode == 0
