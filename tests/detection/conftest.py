"""Fixtures of the detection tests: the reference text detector at a small limit side, and a
small labeled set rendered onto real photos of the shared ImageNet sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.detection.data import generate
from harness.detection.detector import TextDetector
from harness.geometry import LimitSide
from harness.paths import PROJECT_ROOT

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
CLEAN_PHOTOS = ("n01530575_brambling.JPEG", "n01955084_chiton.JPEG", "n02105855_Shetland_sheepdog.JPEG",
                "n02328150_Angora.JPEG", "n02791270_barbershop.JPEG", "n03447447_gondola.JPEG", "n04070727_refrigerator.JPEG",
                "n07583066_guacamole.JPEG")
"""Photos in which the reference detector finds nothing at all (not in docs/detection-imagenet-text.json,
``python -m harness.detection.data find-text``'s list): text already in a photo would have no label."""
SMALL_SIDE = LimitSide(480, "max")
"""Small enough for CI's 2 cores (about 0.3 s a photo), large enough to find the words."""


@pytest.fixture(scope="session")
def sample() -> Path:
    assert SAMPLE.is_dir(), f"the shared ImageNet sample is missing: {SAMPLE}"
    return SAMPLE


@pytest.fixture(scope="session")
def detector() -> TextDetector:
    return TextDetector(SMALL_SIDE, threads=2)


@pytest.fixture(scope="session")
def labeled(sample, tmp_path_factory) -> Path:
    """labels.json of words rendered onto the clean photos (seed 0)."""
    return generate([sample / name for name in CLEAN_PHOTOS], tmp_path_factory.mktemp("labeled"), len(CLEAN_PHOTOS), seed=0)
