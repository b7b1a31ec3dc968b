"""Fixtures of the OCR tests: words rendered onto real photos of the shared ImageNet sample (the
detection tests' generator and photos), and one of them turned a quarter, whose words stand upright."""

from __future__ import annotations

from pathlib import Path

import cv2
import pytest

from harness.detection.data import generate
from harness.paths import PROJECT_ROOT

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
PHOTOS = ("n01530575_brambling.JPEG", "n01955084_chiton.JPEG", "n02328150_Angora.JPEG")
"""Photos in which the reference detector finds no text of their own (tests/detection/conftest.py)."""
TURNED = "0009_turned.jpg"


@pytest.fixture(scope="session")
def words(tmp_path_factory) -> Path:
    """The folder of the rendered photos (labels.json beside it holds their words), with a copy of
    one turned 90 degrees clockwise: its words read top to bottom (PaddleOCR's rotation rule)."""
    assert SAMPLE.is_dir(), f"the shared ImageNet sample is missing: {SAMPLE}"
    labels = generate([SAMPLE / name for name in PHOTOS], tmp_path_factory.mktemp("ocr_words"), len(PHOTOS), seed=0)
    images = labels.parent / "images"
    first = sorted(images.glob("*.jpg"))[0]
    cv2.imwrite(str(images / TURNED), cv2.rotate(cv2.imread(str(first)), cv2.ROTATE_90_CLOCKWISE),
                [cv2.IMWRITE_JPEG_QUALITY, 95])
    return images
