"""The example's postprocessing as the harness takes it (``--postprocess
examples/foreign_detection/postprocess.py:word_boxes``): DB boxes of the detector's map, each
word's axis-aligned box, in the source image's pixels. A deployment answering only its map
(``find_text`` without ``boxes_from_map``) gets its boxes from this, as training does."""

from __future__ import annotations

from harness.detection.boxes import Detections
from harness.detection.db import db_boxes, probability_map
from harness.postprocessing import DbParams

PARAMS = DbParams(thresh=0.3, box_thresh=0.5, unclip_ratio=1.6, box_type="rect")


def word_boxes(outputs, geometry) -> Detections:
    """``outputs``: one image's outputs by name (the map, [1, H, W]); ``geometry``: the letterbox
    that made the model input (harness.geometry.Geometry)."""
    return db_boxes(probability_map(outputs, None), geometry, PARAMS)


word_boxes.score_threshold = PARAMS.box_thresh  # near-threshold box changes are measured from it
