"""DBNet's postprocessing (Differentiable Binarization, PaddleOCR's ``DBPostProcess``): a text
probability map -> word quadrilaterals in the source image's pixels.

Binarize at ``thresh``; each contour's minimum-area rectangle is scored by the mean
probability inside it and kept above ``box_thresh``; kept rectangles are grown by
``unclip_ratio`` (pyclipper's polygon offset by ``area * ratio / perimeter``, shapely for
area and perimeter), re-fitted, mapped back through the preprocessing's geometry (padding
included: a letterboxed input maps back too), rounded to whole pixels and clipped to the
image, as PaddleOCR does.
"""

from __future__ import annotations

from typing import Mapping

import cv2
import numpy as np
import pyclipper
from shapely.geometry import Polygon

from harness.detection.boxes import Detections, order_clockwise
from harness.geometry import Geometry
from harness.postprocessing import DbParams


class DbPostprocess:
    """The ``db`` postprocessor (see :class:`~harness.detection.postprocess.Postprocessor`)."""

    def __init__(self, params: DbParams = DbParams()):
        self.params = params

    def __call__(self, outputs: Mapping[str, np.ndarray], geometry: Geometry) -> Detections:
        return db_boxes(probability_map(outputs, self.params.output), geometry, self.params)


def probability_map(outputs: Mapping[str, np.ndarray], name: str | None) -> np.ndarray:
    """The [H, W] float32 map of one image from its outputs (``[1, H, W]`` or ``[H, W]``)."""
    if name is None:
        if len(outputs) != 1:
            raise ValueError(f"db: the model has {len(outputs)} outputs ({', '.join(outputs)}): name the map with `output`")
        name = next(iter(outputs))
    if name not in outputs:
        raise ValueError(f"db: no output named {name!r} (outputs: {', '.join(outputs)})")
    prob = np.asarray(outputs[name], np.float32)
    while prob.ndim > 2 and prob.shape[0] == 1:
        prob = prob[0]
    if prob.ndim != 2:
        raise ValueError(f"db: output {name!r} must be one [1, H, W] probability map per image, got {list(prob.shape)}")
    return prob


def db_boxes(prob: np.ndarray, geometry: Geometry, p: DbParams = DbParams()) -> Detections:
    """Word quads of one [H, W] probability map, in the source pixels of ``geometry``."""
    height, width = prob.shape
    mask = (prob > p.thresh).astype(np.uint8)
    if p.use_dilation:
        mask = cv2.dilate(mask, np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(mask * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    # map pixels -> model input pixels (a map smaller than the input is scaled up) -> source
    to_input = np.array([geometry.input[1] / width, geometry.input[0] / height])
    src_h, src_w = geometry.source
    quads, scores = [], []
    for contour in contours[:p.max_candidates]:
        rect, short_side = _min_area_rect(contour)
        if short_side < p.min_size:
            continue
        score = _mean_inside(prob, rect if p.score_mode == "fast" else contour.reshape(-1, 2))
        if score < p.box_thresh:
            continue
        grown = _unclip(rect, p.unclip_ratio)
        if grown is None:
            continue
        rect, short_side = _min_area_rect(grown)
        if short_side < p.min_size + 2:
            continue
        corners = np.round(geometry.to_original(rect * to_input))
        corners[:, 0] = np.clip(corners[:, 0], 0, src_w - 1)
        corners[:, 1] = np.clip(corners[:, 1], 0, src_h - 1)
        quad = order_clockwise(corners)
        if int(np.linalg.norm(quad[0] - quad[1])) <= 3 or int(np.linalg.norm(quad[0] - quad[3])) <= 3:
            continue  # a sliver left by the clipping
        quads.append(quad)
        scores.append(score)
    if not quads:
        return Detections.empty()
    found = Detections(np.array(quads), np.array(scores))
    return Detections.from_xyxy(found.xyxy, found.scores) if p.box_type == "rect" else found


def _min_area_rect(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle's 4 corners (float32 [4, 2]) and its shorter side."""
    rect = cv2.minAreaRect(np.asarray(points, np.float32).reshape(-1, 1, 2))
    return cv2.boxPoints(rect), min(rect[1])


def _mean_inside(prob: np.ndarray, polygon: np.ndarray) -> float:
    """Mean probability inside a polygon (its bounding window, filled with integer corners)."""
    h, w = prob.shape
    x0, y0 = np.clip(np.floor(polygon.min(axis=0)).astype(int), 0, [w - 1, h - 1])
    x1, y1 = np.clip(np.ceil(polygon.max(axis=0)).astype(int), 0, [w - 1, h - 1])
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(mask, [(polygon - [x0, y0]).astype(np.int32).reshape(-1, 1, 2)], 1)
    return float(cv2.mean(prob[y0:y1 + 1, x0:x1 + 1], mask)[0])


def _unclip(rect: np.ndarray, ratio: float) -> np.ndarray | None:
    """The rectangle grown by ``area * ratio / perimeter`` (rounded joins), or None if empty."""
    poly = Polygon(rect)
    if poly.length == 0:
        return None
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(rect.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    grown = offset.Execute(poly.area * ratio / poly.length)
    if len(grown) != 1:  # nothing, or a shape that split: PaddleOCR drops both
        return None
    return np.asarray(grown[0], np.float32)
