"""harness/detection/db.py on the real detector's probability maps of real photos: the same
quads as rapidocr's own DB postprocessing, parameters that act, and a letterboxed input
mapped back through its padding."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from rapidocr.ch_ppocr_det.utils import DBPostProcess

from harness.detection.db import DbParams, DbPostprocess, db_boxes
from harness.detection.detector import OUTPUT_NAME, TextDetector
from harness.detection.effect import image_outcome, load_labels
from harness.geometry import Geometry, Letterbox, LimitSide
from harness.paths import DEFAULT_PHOTOS

TEXT_PHOTOS = ("board.jpg", "LinuxLogo.jpg", "licenseplate_motion.jpg", "text_motion.jpg")
"""Photos of the corpus (data/photos) with real text in them."""


def as_rows(quads: np.ndarray) -> list:
    return sorted(np.asarray(quads).astype(int).reshape(-1, 8).tolist())


@pytest.mark.parametrize("params", [DbParams(), DbParams(box_thresh=0.6, unclip_ratio=1.5, use_dilation=False),
                                    DbParams(score_mode="slow", thresh=0.2)])
def test_the_same_quads_as_rapidocrs_db_postprocessing(params):
    detector = TextDetector(LimitSide(320, "min"), threads=2)
    theirs_post = DBPostProcess(params.thresh, params.box_thresh, params.max_candidates, params.unclip_ratio, params.score_mode,
                                params.use_dilation)
    boxes = 0
    for name in TEXT_PHOTOS:
        bgr = cv2.imread(str(DEFAULT_PHOTOS / name))
        result = detector(bgr)
        ours = DbPostprocess(params)({OUTPUT_NAME: result.probability[0]}, result.geometry)
        theirs, scores = theirs_post(result.probability, bgr.shape[:2])
        assert as_rows(ours.quads) == as_rows(theirs), name
        assert sorted(np.round(ours.scores, 6)) == sorted(np.round(scores, 6))
        boxes += len(ours)
    assert boxes >= 15  # board.jpg alone holds a dozen words at this size


def test_parameters_act_on_a_real_map():
    result = TextDetector(LimitSide(320, "min"), threads=2)(cv2.imread(str(DEFAULT_PHOTOS / "board.jpg")))
    prob = result.probability[0, 0]
    base = db_boxes(prob, result.geometry)
    assert len(db_boxes(prob, result.geometry, DbParams(box_thresh=0.95))) < len(base)
    assert len(db_boxes(prob, result.geometry, DbParams(max_candidates=2))) <= 2
    wider = db_boxes(prob, result.geometry, DbParams(unclip_ratio=2.5))
    assert np.median([cv2.contourArea(q.astype(np.float32)) for q in wider.quads]) > \
        np.median([cv2.contourArea(q.astype(np.float32)) for q in base.quads])
    blank = db_boxes(np.zeros_like(prob), result.geometry)
    assert len(blank) == 0 and blank.quads.shape == (0, 4, 2)


def test_a_letterboxed_input_maps_back_through_its_padding(labeled):
    """The detector fed a letterboxed photo (grey bars) finds the rendered words where they
    are in the photo; the same map read as if unpadded puts them off by the padding."""
    labels = load_labels(labeled)
    detector = TextDetector(Letterbox((640, 640), pad_value=114), threads=2)
    found = wrong = labeled_boxes = 0
    for name, truth in list(labels.boxes.items())[:4]:
        result = detector(cv2.imread(str(labeled.parent / name)))
        assert any(result.geometry.pad)
        found += image_outcome(name, truth, result.detections).matched
        g = result.geometry
        unpadded = Geometry(g.source, g.input)  # the back-mapping bug: padding taken for picture
        wrong += image_outcome(name, truth, db_boxes(result.probability[0, 0], unpadded)).matched
        labeled_boxes += len(truth)
    assert found >= 0.75 * labeled_boxes and wrong < found / 2, (found, wrong, labeled_boxes)


def test_a_map_that_is_not_one_image_is_refused():
    post = DbPostprocess()
    g = Geometry((10, 10), (32, 32))
    with pytest.raises(ValueError, match="one \\[1, H, W\\] probability map"):
        post({"map": np.zeros((2, 1, 32, 32))}, g)
    with pytest.raises(ValueError, match="name the map"):
        post({"a": np.zeros((32, 32)), "b": np.zeros((32, 32))}, g)
    with pytest.raises(ValueError, match="no output named 'x'"):
        DbPostprocess(DbParams(output="x"))({"a": np.zeros((32, 32))}, g)
