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


CLEAN = "n07583066_guacamole.JPEG"
"""A photo in which the detector finds nothing at the tests' limit side (320)."""
LONG_LINE = "the harbour market opens at 7 on Sundays"


@pytest.fixture(scope="session")
def odd_words(tmp_path_factory) -> Path:
    """A photo without text, one holding a word of one character, and one holding a long line."""
    import random

    from harness.detection.data import RenderSettings, render_words

    out = tmp_path_factory.mktemp("ocr_odd")
    photo = cv2.imread(str(SAMPLE / CLEAN))
    cv2.imwrite(str(out / "no_text.jpg"), photo, [cv2.IMWRITE_JPEG_QUALITY, 95])
    rgb = cv2.cvtColor(photo, cv2.COLOR_BGR2RGB)
    for name, settings in (("one_character.jpg", RenderSettings(words=(1, 1), vocabulary=("7",), height=(0.3, 0.3),
                                                                  max_angle=0)),
                           ("long_line.jpg", RenderSettings(words=(1, 1), vocabulary=(LONG_LINE,), height=(0.06, 0.06),
                                                            max_angle=0))):
        drawn, placed = render_words(rgb, random.Random(1), settings)
        assert placed, f"{name}: the word did not fit the photo"
        cv2.imwrite(str(out / name), cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
    return out
