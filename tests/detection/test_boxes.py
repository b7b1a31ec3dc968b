"""harness/detection/boxes.py: IoU of quads (checked against torchvision for axis-aligned
boxes and by hand for turned ones), one-to-one matching, and the Detections record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.manifest import load_dalis_nvjpeg

load_dalis_nvjpeg()  # before torchvision (imported at collection), whose nvJPEG would otherwise be DALI's in every test
import torchvision  # noqa: E402

from harness.detection.boxes import Detections, greedy_match, iou_matrix, order_clockwise  # noqa: E402


def test_axis_aligned_iou_is_torchvisions():
    rng = np.random.default_rng(0)
    a = np.concatenate([(xy := rng.uniform(0, 400, (40, 2))), xy + rng.uniform(1, 120, (40, 2))], 1)
    b = np.concatenate([(xy := rng.uniform(0, 400, (30, 2))), xy + rng.uniform(1, 120, (30, 2))], 1)
    ours = iou_matrix(Detections.from_xyxy(a, np.ones(40)).quads, Detections.from_xyxy(b, np.ones(30)).quads)
    theirs = torchvision.ops.box_iou(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert np.abs(ours - theirs).max() < 1e-12 and (theirs > 0).sum() > 10


def test_turned_quads_are_measured_as_polygons():
    square = np.array([[0, 0], [2, 0], [2, 2], [0, 2]], float)
    diamond = np.array([[1, -1], [3, 1], [1, 3], [-1, 1]], float)  # a square turned 45 degrees, same centre
    # the square (area 4) lies inside the diamond (area 8), its corners on the diamond's edges: IoU 4 / 8,
    # where the two quads' enclosing axis-aligned boxes would give 4 / 16
    assert iou_matrix(square[None], diamond[None])[0, 0] == pytest.approx(0.5)
    assert iou_matrix(square[None], square[None])[0, 0] == 1.0
    bow_tie = square[[0, 2, 1, 3]]  # corners in a crossing order: repaired, not a zero-area polygon
    assert iou_matrix(bow_tie[None], square[None])[0, 0] > 0
    assert iou_matrix(np.zeros((0, 4, 2)), square[None]).shape == (0, 1)


def test_order_clockwise_from_the_top_left():
    quad = np.array([[10, 20], [0, 0], [10, 0], [0, 20]], float)
    assert order_clockwise(quad).tolist() == [[0, 0], [10, 0], [10, 20], [0, 20]]


def test_greedy_match_takes_the_best_scored_first_one_to_one():
    iou = np.array([[0.6, 0.9], [0.8, 0.55], [0.3, 0.2]])
    # row 1 scores highest: it takes column 0; row 0 then takes column 1; row 2 is below threshold
    assert greedy_match(iou, np.array([0.5, 0.9, 0.8]), 0.5) == [(1, 0), (0, 1)]
    assert greedy_match(iou, np.array([0.9, 0.5, 0.8]), 0.5) == [(0, 1), (1, 0)]
    assert greedy_match(np.array([[0.5]]), np.ones(1), 0.5) == []  # strictly above, as ICDAR
    assert greedy_match(iou, np.ones(3), 0.5, same_class=np.array([[False, True], [False, True], [True, True]])) == [(0, 1)]


def test_detections_round_trip_and_refuse_mismatched_lengths():
    d = Detections.from_xyxy([[1, 2, 3, 4]], [0.5], [7])
    back = Detections.from_dict(json.loads(json.dumps(d.to_dict())))
    assert np.array_equal(back.quads, d.quads) and back.scores.tolist() == [0.5] and back.classes.tolist() == [7]
    assert d.xyxy.tolist() == [[1, 2, 3, 4]] and len(Detections.empty()) == 0
    with pytest.raises(ValueError, match="2 boxes but 1 scores"):
        Detections(np.zeros((2, 4, 2)), [1.0])
