"""harness/detection/detector.py: the PP-OCRv6 detector from the rapidocr wheel with its
licence notice, rapidocr's preprocessing to the bit, and words found on real photos."""

from __future__ import annotations

import cv2
import numpy as np
from rapidocr.ch_ppocr_det.utils import DetPreProcess

from harness.detection.detector import MODEL_SHA256, TextDetector, install_model, sha256, to_input
from harness.geometry import LimitSide
from harness.paths import DEFAULT_PHOTOS


def test_a_copy_of_the_model_carries_its_licence_notice(tmp_path):
    model = install_model(tmp_path / "detector" / "1")
    assert sha256(model) == MODEL_SHA256
    notice = (model.parent / "MODEL_LICENSES.md").read_text()
    assert "PP-OCRv6_det_small.onnx" in notice and MODEL_SHA256 in notice and "Apache" in notice
    assert "Apache License" in (model.parent / "LICENSE").read_text()


def test_the_input_is_rapidocrs_to_the_bit_on_real_photos():
    for name in ("board.jpg", "text_motion.jpg", "baboon.jpg"):
        bgr = cv2.imread(str(DEFAULT_PHOTOS / name))
        for limit in (LimitSide(736, "min"), LimitSide(480, "max")):
            ours, geometry = to_input(bgr, limit)
            theirs = DetPreProcess(limit.limit_side_len, limit.limit_type)(bgr)
            assert ours.dtype == np.float32 and np.array_equal(ours, theirs) and ours.shape[2:] == geometry.input


def test_the_detector_finds_the_words_of_a_real_notice_board(detector):
    bgr = cv2.imread(str(DEFAULT_PHOTOS / "board.jpg"))
    result = detector(bgr)
    assert result.probability.shape == (1, 1, *result.geometry.input)
    assert 0 <= result.probability.min() and result.probability.max() <= 1
    large = TextDetector(LimitSide(736, "min"), threads=2)(bgr)
    assert len(large.detections) > len(result.detections) >= 1  # more words at rapidocr's own size
    assert (large.detections.quads[..., 0] <= bgr.shape[1]).all() and (large.detections.scores >= 0.5).all()
