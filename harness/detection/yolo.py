"""YOLO heads -> boxes in the source image's pixels: decode, confidence threshold, class-aware
NMS, back through the letterbox.

Two raw head layouts (one image, batch axis removed):

- ``v5``: ``[boxes, 5 + classes]``: cx, cy, w, h, objectness, class probabilities; a box's
  score is objectness x its best class probability;
- ``v8``: ``[4 + classes, boxes]``: cx, cy, w, h, class scores (no objectness); the score is
  the best class score.

NMS is a choice, because the two everyone uses differ: ``torchvision``
(``torchvision.ops.batched_nms``, IoU in the boxes' float32) and ``opencv``
(``cv2.dnn.NMSBoxesBatched``, IoU in float64, boxes as x, y, w, h); a pair of boxes whose IoU
sits at the threshold can be kept by one and suppressed by the other.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from harness.detection.boxes import Detections
from harness.geometry import Geometry
from harness.manifest import load_dalis_nvjpeg
from harness.postprocessing import YoloParams


class YoloPostprocess:
    """The ``yolo`` postprocessor (see :class:`~harness.detection.postprocess.Postprocessor`)."""

    def __init__(self, params: YoloParams = YoloParams()):
        self.params = params

    def __call__(self, outputs: Mapping[str, np.ndarray], geometry: Geometry) -> Detections:
        p = self.params
        if p.output is None and len(outputs) != 1:
            raise ValueError(f"yolo: the model has {len(outputs)} outputs ({', '.join(outputs)}): name the head with `output`")
        name = p.output or next(iter(outputs))
        if name not in outputs:
            raise ValueError(f"yolo: no output named {name!r} (outputs: {', '.join(outputs)})")
        return yolo_boxes(np.asarray(outputs[name]), geometry, p)


def decode_head(head: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's head -> (xyxy [N, 4] in model input pixels, score [N], class [N])."""
    head = np.asarray(head, np.float32)
    if head.ndim == 3 and head.shape[0] == 1:
        head = head[0]
    if head.ndim != 2:
        raise ValueError(f"yolo {layout}: expected one [boxes, values] head per image, got {list(head.shape)}")
    if layout == "v8":
        head = head.T  # [4 + classes, boxes] -> [boxes, 4 + classes]
        if head.shape[1] < 5:
            raise ValueError(f"yolo v8: a head of {head.shape[1]} rows has no class score (4 + classes rows)")
        class_scores = head[:, 4:]
    else:
        if head.shape[1] < 6:
            raise ValueError(f"yolo v5: a head of {head.shape[1]} columns has no class (5 + classes columns)")
        class_scores = head[:, 5:] * head[:, 4:5]
    classes = np.argmax(class_scores, axis=1)
    scores = class_scores[np.arange(len(head)), classes]
    cx, cy, w, h = head[:, 0], head[:, 1], head[:, 2], head[:, 3]
    xyxy = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return xyxy, scores, classes.astype(np.int64)


def nms(xyxy: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float, implementation: str) -> np.ndarray:
    """Indices kept by class-aware NMS (pass one class for agnostic), best score first."""
    if not len(xyxy):
        return np.zeros(0, np.int64)
    if implementation == "opencv":
        import cv2

        xywh = np.concatenate([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], axis=1).astype(np.float64)
        # OpenCV's own score threshold 0: the confidence threshold is already applied (it keeps score > 0)
        keep = cv2.dnn.NMSBoxesBatched(xywh.tolist(), scores.astype(float).tolist(), classes.astype(int).tolist(),
                                       0.0, float(iou_threshold))
        return np.asarray(keep, np.int64).reshape(-1)
    import torch

    load_dalis_nvjpeg()  # before torchvision, whose nvJPEG would otherwise be DALI's
    import torchvision

    keep = torchvision.ops.batched_nms(torch.from_numpy(np.ascontiguousarray(xyxy, np.float32)),
                                       torch.from_numpy(np.ascontiguousarray(scores, np.float32)),
                                       torch.from_numpy(np.ascontiguousarray(classes, np.int64)), float(iou_threshold))
    return keep.numpy().astype(np.int64)


def yolo_boxes(head: np.ndarray, geometry: Geometry, p: YoloParams = YoloParams()) -> Detections:
    """Boxes of one image's raw head, in the source pixels of ``geometry`` (clipped to it)."""
    xyxy, scores, classes = decode_head(head, p.layout)
    candidates = scores > p.conf_threshold
    xyxy, scores, classes = xyxy[candidates], scores[candidates], classes[candidates]
    keep = nms(xyxy, scores, np.zeros_like(classes) if p.class_agnostic else classes, p.iou_threshold, p.nms)[:p.max_det]
    xyxy, scores, classes = xyxy[keep], scores[keep], classes[keep]
    corners = geometry.to_original(xyxy.reshape(-1, 2, 2)).reshape(-1, 4)
    src_h, src_w = geometry.source
    corners[:, [0, 2]] = np.clip(corners[:, [0, 2]], 0, src_w)
    corners[:, [1, 3]] = np.clip(corners[:, [1, 3]], 0, src_h)
    return Detections.from_xyxy(corners, scores.astype(np.float64), classes)
