"""harness/detection/effect.py: precision, recall, F1 (ICDAR at IoU 0.5), COCO mAP and the
paired test, by hand on a small case and with the real detector on the labeled set."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from harness.detection.boxes import Detections
from harness.detection.detector import TextDetector
from harness.detection.effect import LabelsError, evaluate_detection, load_labels
from harness.geometry import LimitSide
from tests.detection.conftest import SMALL_SIDE


def test_the_labels_themselves_score_perfectly_and_nothing_scores_nothing(labeled):
    labels = load_labels(labeled)
    perfect = {n: Detections(b.quads, np.ones(len(b))) for n, b in labels.boxes.items()}
    nothing = {n: Detections.empty() for n in labels.boxes}
    e = evaluate_detection(labels, [("labels", perfect), ("nothing", nothing)])
    best, empty = e.paths
    assert (best.precision, best.recall, best.f1, best.coco_map50) == (1.0, 1.0, 1.0, 1.0)
    assert best.coco_map == pytest.approx(1.0) and best.images_right == len(labels.boxes)
    assert (empty.precision, empty.recall, empty.f1, empty.coco_map) == (None, 0.0, None, 0.0)
    assert empty.mcnemar.b == sum(len(b) > 0 for b in labels.boxes.values()) and empty.mcnemar.p_value < 0.05
    json.dumps(e.to_dict(), allow_nan=False)


def test_counts_by_hand():
    square = [[0, 0], [10, 0], [10, 10], [0, 10]]
    coco = {"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}, {"id": 3, "file_name": "c.jpg"}],
            "categories": [{"id": 1, "name": "text"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
                            {"id": 2, "image_id": 1, "category_id": 1, "segmentation": [[20, 0, 30, 0, 30, 10, 20, 10]]},
                            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [0, 0, 10, 10]}]}
    labels = load_labels(coco)
    one = Detections(np.array([square]), [0.9])
    shifted = Detections(np.array([square]) + [6, 0], [0.9])  # IoU 4/16: not a match
    found = {"a.jpg": one, "b.jpg": shifted, "c.jpg": Detections.empty()}
    e = evaluate_detection(labels, [("ref", found), ("dep", {"a.jpg": one, "b.jpg": one})])
    assert e.left_out == ("c.jpg",) and e.evaluated == ("a.jpg", "b.jpg")  # c has no deployed result: named
    ref, dep = e.paths
    assert (ref.matched, ref.detected, ref.labeled) == (1, 2, 3) and ref.f1 == pytest.approx(2 / 5)
    assert (dep.matched, dep.detected, dep.labeled) == (2, 2, 3) and dep.precision == 1.0 and dep.recall == pytest.approx(2 / 3)
    assert (dep.mcnemar.b, dep.mcnemar.c) == (0, 1)  # b.jpg: right for the deployment only


def test_the_real_detector_on_the_labeled_set(labeled):
    """The figures the closing note gives: the reference detector (limit side 480, max)
    against the words, and the same detector at a smaller limit side as a planted change."""
    labels = load_labels(labeled)

    def run(detector):
        return {n: detector(cv2.imread(str(labeled.parent / n))).detections for n in labels.boxes}

    e = evaluate_detection(labels, [("reference", run(TextDetector(SMALL_SIDE, threads=2))),
                                    ("limit 320", run(TextDetector(LimitSide(320, "max"), threads=2)))])
    ref, small = e.paths
    print(f"reference P {ref.precision:.3f} R {ref.recall:.3f} F1 {ref.f1:.3f} mAP {ref.coco_map:.3f} "
          f"mAP50 {ref.coco_map50:.3f}; limit 320: F1 {small.f1:.3f}")
    assert ref.labeled >= 16 and ref.recall >= 0.8 and ref.precision >= 0.8 and ref.coco_map50 >= 0.8
    assert small.f1 < ref.f1 and small.mcnemar is not None


@pytest.mark.parametrize("coco, message", [
    ({"images": []}, "not COCO detection JSON"),
    ({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
      "annotations": [{"id": 9, "image_id": 2, "category_id": 1, "bbox": [0, 0, 1, 1]}]}, "annotation 9 names image 2"),
])
def test_bad_labels_are_one_clear_error(coco, message):
    with pytest.raises(LabelsError, match=message):
        load_labels(coco)


def test_an_annotation_without_a_box_is_its_images_row():
    found = load_labels({"images": [{"id": 1, "file_name": "a"}], "categories": [{"id": 1}],
                         "annotations": [{"id": 9, "image_id": 1, "category_id": 1}]})
    assert "annotation 9 has neither a 4-point segmentation nor a bbox" in found.unusable["a"]


def test_a_models_class_indices_are_read_as_the_labels_categories():
    """A model numbers its classes from 0; COCO labels name categories by id (1 to 90 for COCO):
    one category takes every box, several map index k to the k-th category by id."""
    square = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], np.float64)
    far = square + 50
    coco = {"images": [{"id": 1, "file_name": "a.jpg"}],
            "categories": [{"id": 3, "name": "cat"}, {"id": 1, "name": "sign"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
                            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [50, 50, 10, 10]}]}
    labels = load_labels(coco)
    by_index = Detections(np.concatenate([square, far]), [0.9, 0.8], [0, 1])  # sign is index 0, cat index 1
    by_id = Detections(np.concatenate([square, far]), [0.9, 0.8], [1, 3])
    wrong = Detections(np.concatenate([square, far]), [0.9, 0.8], [1, 0])  # index 1 (cat) on the sign's box
    found = evaluate_detection(labels, [("index", {"a.jpg": by_index}), ("id", {"a.jpg": by_id}),
                                        ("wrong", {"a.jpg": wrong})])
    assert [p.matched for p in found.paths] == [2, 2, 0]
    one = load_labels({**coco, "categories": [{"id": 1, "name": "text"}],
                       "annotations": [dict(a, category_id=1) for a in coco["annotations"]]})
    assert evaluate_detection(one, [("class 0", {"a.jpg": Detections(by_index.quads, [0.9, 0.8], [0, 0])})]).paths[0].f1 == 1
