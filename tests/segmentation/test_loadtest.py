"""The load test knows a segmenter's answer: asked for its MATTE and MASK, each answer judged
against the photo's answer alone by the segmentation task's rule."""

from __future__ import annotations

import numpy as np
import pytest

from harness.segmentation.compare import judge_answer as judge_mask
from harness.segmentation.postprocess import SegmentationPostprocess
from harness.task import get_task
from loadtest.answers import rule_for
from loadtest.responses import SEGMENTATION_RESULTS, RequestFailed, check_mask


def answer(saliency: np.ndarray) -> dict:
    result = SegmentationPostprocess({"name": "saliency"})({"o": saliency}, (90, 120))
    return {"MATTE": result[0], "MASK": result[1].astype(np.uint8)}


def test_a_segmenters_answer_is_judged_by_the_segmentation_rule():
    assert SEGMENTATION_RESULTS == get_task("segmentation").repository.results
    rng = np.random.default_rng(3)
    saliency = rng.random((1, 320, 320), np.float32)
    known = answer(saliency)
    assert rule_for(known) is judge_mask
    assert judge_mask(known, answer(saliency)).change is None
    flipped = answer(1 - saliency)  # the inverse mask: every pixel far from the threshold flips
    judged = judge_mask(known, flipped)
    assert judged.change is not None and "pixels flipped" in judged.change and judged.error == float("inf")
    check_mask(np.zeros((1, 90, 120), np.float32), np.zeros((1, 90, 120), np.uint8))
    with pytest.raises(RequestFailed) as refused:
        check_mask(np.zeros((1, 90, 120), np.float32), np.zeros((1, 90, 121), np.uint8))
    assert refused.value.error == "bad response" and "expected one [H, W] each" in refused.value.detail

