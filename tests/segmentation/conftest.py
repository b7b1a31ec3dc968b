"""Fixtures of the segmentation tests: one server of the segmentation models only (the cpu
profile, explicit model control), and a few real photos with a salient object."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.paths import PROJECT_ROOT
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from tests.conftest import pipeline_models

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
PHOTOS = ("n01530575_brambling.JPEG", "n02328150_Angora.JPEG")
"""Real photos with one salient animal each (the ImageNet sample)."""
SEGMENT_MODELS = pipeline_models("segmentation")


@pytest.fixture(scope="module")
def segmentation_server(repository, tmp_path_factory):
    profile = build_cpu_profile(repository, tmp_path_factory.mktemp("segmentation") / "repository")
    triton = TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=SEGMENT_MODELS)
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="session")
def segmentation_photos(tmp_path_factory) -> Path:
    """The real photos, and one of them dimmed (its brightest value 150, as an underexposed shot:
    dividing by 255 and by the image's maximum then differ)."""
    import cv2

    folder = tmp_path_factory.mktemp("segmentation_photos")
    for name in PHOTOS:
        (folder / name).write_bytes((SAMPLE / name).read_bytes())
    photo = cv2.imread(str(SAMPLE / PHOTOS[1]))
    dim = (photo.astype("float32") * (150.0 / photo.max())).round().astype("uint8")
    cv2.imwrite(str(folder / "dim_angora.jpg"), dim, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return folder
