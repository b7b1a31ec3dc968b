"""harness/detection/yolo.py: YOLOv5 and YOLOv8 heads built from the labeled boxes of real
photos (each box plus jittered duplicates plus background), decoded back to the labels
through the letterbox, with either NMS; and where torchvision's and OpenCV's NMS part."""

from __future__ import annotations

import numpy as np
import pytest

from harness.detection.boxes import Detections, iou_matrix
from harness.detection.effect import load_labels
from harness.detection.postprocess import from_table
from harness.detection.yolo import YoloParams, YoloPostprocess, nms, yolo_boxes
from harness.geometry import Letterbox, letterbox_geometry

CLASSES = 3


def head_for(truth: Detections, geometry, layout: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A raw head holding each labeled box (score 0.9, class i % 3), three duplicates moved by
    a few pixels with lower scores, and 300 background rows scoring below 0.1."""
    rng = np.random.default_rng(seed)
    boxes = geometry.to_input(truth.xyxy.reshape(-1, 2, 2)).reshape(-1, 4)
    rows, classes = [], np.arange(len(boxes)) % CLASSES
    for box, cls in zip(boxes, classes):
        for k, score in enumerate((0.9, 0.8, 0.7, 0.6)):
            b = box + (rng.normal(0, 2, 4) if k else 0)
            rows.append(_row(b, score, cls, layout))
    h, w = geometry.input
    for _ in range(300):
        x, y = rng.uniform(0, w - 40), rng.uniform(0, h - 40)
        rows.append(_row(np.array([x, y, x + rng.uniform(5, 40), y + rng.uniform(5, 40)]), rng.uniform(0, 0.1),
                         rng.integers(CLASSES), layout))
    head = np.array(rows, np.float32)
    return (head.T if layout == "v8" else head), classes


def _row(xyxy, score, cls, layout):
    cx, cy, w, h = (xyxy[0] + xyxy[2]) / 2, (xyxy[1] + xyxy[3]) / 2, xyxy[2] - xyxy[0], xyxy[3] - xyxy[1]
    probs = np.full(CLASSES, 0.01)
    if layout == "v5":  # objectness x class probability = score
        probs[cls] = 1.0
        return [cx, cy, w, h, score, *probs]
    probs[cls] = score
    return [cx, cy, w, h, *probs]


@pytest.mark.parametrize("layout", ["v5", "v8"])
@pytest.mark.parametrize("implementation", ["torchvision", "opencv"])
def test_a_head_decodes_to_the_labeled_boxes_through_the_letterbox(labeled, layout, implementation):
    labels = load_labels(labeled)
    checked = 0
    for i, (name, truth) in enumerate(labels.boxes.items()):
        if not len(truth):
            continue
        box = Letterbox((640, 640)) if i % 2 else Letterbox((480, 640), auto=True)
        g = letterbox_geometry(*_size(labels, name), box)
        head, classes = head_for(truth, g, layout, seed=i)
        found = YoloPostprocess(YoloParams(layout=layout, nms=implementation))({"output0": head}, g)
        assert len(found) == len(truth), name  # duplicates suppressed, background under the threshold
        upright = Detections.from_xyxy(truth.xyxy, truth.scores)  # a turned word's label: its enclosing box
        iou = iou_matrix(upright.quads, found.quads)
        assert (iou.max(axis=1) > 0.99).all() and sorted(found.classes.tolist()) == sorted(classes.tolist())
        checked += 1
    assert checked >= 6


def _size(labels, name):
    image = next(im for im in labels.coco["images"] if im["file_name"] == name)
    return image["height"], image["width"]


def test_the_wrong_back_mapping_moves_every_box(labeled):
    labels = load_labels(labeled)
    name, truth = next((n, t) for n, t in labels.boxes.items() if len(t))
    g = letterbox_geometry(*_size(labels, name), Letterbox((640, 640)))
    head, _ = head_for(truth, g, "v8")
    as_if_top_left = letterbox_geometry(*_size(labels, name), Letterbox((640, 640), pad_position="top_left"))
    assert any(g.pad) and g.pad != as_if_top_left.pad
    moved = yolo_boxes(head, as_if_top_left)
    upright = Detections.from_xyxy(truth.xyxy, truth.scores)
    assert iou_matrix(upright.quads, yolo_boxes(head, g).quads).max(axis=1).min() > 0.99
    assert iou_matrix(upright.quads, moved.quads).max(axis=1).max() < 0.99


def test_nms_is_per_class_unless_agnostic():
    xyxy = np.array([[100, 100, 200, 200], [105, 100, 205, 200]], float)
    scores, classes = np.array([0.9, 0.8]), np.array([0, 1])
    for implementation in ("torchvision", "opencv"):
        assert nms(xyxy, scores, classes, 0.45, implementation).tolist() == [0, 1]
        assert nms(xyxy, scores, np.zeros(2, np.int64), 0.45, implementation).tolist() == [0]


def test_torchvision_and_opencv_nms_part_at_the_threshold():
    """Two boxes whose IoU is 0.45 to float32 precision: torchvision (IoU in float32) suppresses
    the second, OpenCV (float64) keeps it: the choice is a culprit of its own."""
    dx = 37.931034088134766  # 55 / 1.45 in float32: IoU (100 - dx) / (100 + dx) = 0.45
    xyxy = np.array([[0, 0, 100, 50], [dx, 0, 100 + dx, 50]], np.float64) + 300
    scores, classes = np.array([0.9, 0.8]), np.zeros(2, np.int64)
    assert nms(xyxy, scores, classes, 0.45, "torchvision").tolist() == [0]
    assert nms(xyxy, scores, classes, 0.45, "opencv").tolist() == [0, 1]


def test_bad_heads_and_parameters_are_one_clear_error():
    g = letterbox_geometry(100, 100, Letterbox((64, 64)))
    with pytest.raises(ValueError, match="no class score"):
        yolo_boxes(np.zeros((4, 10)), g, YoloParams(layout="v8"))
    with pytest.raises(ValueError, match="5 \\+ classes"):
        yolo_boxes(np.zeros((10, 5)), g, YoloParams(layout="v5"))
    with pytest.raises(ValueError, match="name the head"):
        YoloPostprocess()({"a": np.zeros((6, 3)), "b": np.zeros((6, 3))}, g)
    with pytest.raises(ValueError, match="nms must be"):
        YoloParams(nms="fast")
    assert len(yolo_boxes(np.zeros((1, 84, 0), np.float32), g)) == 0  # no candidate: no box, no error


def test_a_postprocess_table_builds_its_postprocessor():
    post = from_table({"name": "yolo", "layout": "v5", "conf_threshold": 0.4})
    assert isinstance(post, YoloPostprocess) and post.params == YoloParams(layout="v5", conf_threshold=0.4)
    assert from_table({"name": "db"}).params.box_thresh == 0.5
    with pytest.raises(ValueError, match="has no parameter conf; it has"):
        from_table({"name": "yolo", "conf": 0.4})
    with pytest.raises(ValueError, match="name must be one of db, yolo"):
        from_table({"name": "ssd"})
