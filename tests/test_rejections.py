"""One-sided rejection (issue 10): an image the training recipe decodes but the deployed
server rejects is a divergence of its own, counted apart, failing the run by default.

The real case: a JPEG whose luma is sampled 3x1 (legal JPEG). OpenCV, the training recipe's
decoder, reads it (so does DALI's); the deployment's validation step (libjpeg-turbo's TurboJPEG,
which cannot name that subsampling) refuses it. (It was a 1-bit TIFF, which DALI's decoder cannot
read, until issue 58 had the image guard refuse such files by name on every path.)"""

import json

import pytest

from tests.commands import harness
from tests.conftest import copy_photos

ONE_SIDED = "sampled_3x1.jpg"


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    from tests.attack_files import jpeg_grey_sampled

    directory = copy_photos(photos_dir, ("squirrel_cls.jpg", "baboon.jpg"), tmp_path_factory.mktemp("images"))
    (directory / ONE_SIDED).write_bytes(jpeg_grey_sampled(320, 240, 0x31))
    return directory


def test_an_image_only_the_server_rejects_fails_check(server, images, tmp_path):
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path, "--no-isolate")
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    [rejected] = report["rejected"]["deployment"]
    assert rejected["image"] == ONE_SIDED and rejected["reason"].startswith("deployed: ")
    assert report["rejected"]["training"] == [] and report["failed"] == [] and report["compared"] == 2
    assert report["first_divergent_stage"] is None  # the compared images agree: the rejection alone fails it
    assert "**1 image rejected by deployment**" in result.stdout and "## Rejected by deployment only" in result.stdout
    with (tmp_path / "per_image.csv").open() as f:
        assert any(line.startswith(f"{ONE_SIDED},rejected by deployment,") for line in f)
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
