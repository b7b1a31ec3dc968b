"""harness/detection/draw.py: both sides' boxes on a real photo, in their own colours."""

from __future__ import annotations

import cv2
import numpy as np

from harness.detection.boxes import Detections
from harness.detection.draw import DEPLOYED_COLOUR, REFERENCE_COLOUR, draw_comparison, write_png
from harness.detection.effect import load_labels


def test_each_side_is_drawn_in_its_colour_above_a_legend(labeled, tmp_path):
    labels = load_labels(labeled)
    name, truth = next((n, b) for n, b in labels.boxes.items() if len(b) >= 2)
    rgb = cv2.imread(str(labeled.parent / name))[..., ::-1]
    deployed = truth.select(np.arange(1, len(truth)))  # the first word lost
    deployed = Detections(deployed.quads + [3, 0], deployed.scores)
    drawn = draw_comparison(rgb, truth, deployed)
    legend = drawn.shape[0] - rgb.shape[0]
    assert legend > 0 and drawn.shape[1] == rgb.shape[1]
    photo = drawn[legend:]

    def colour_at(quad, colour):
        x, top = int(round((quad[0, 0] + quad[1, 0]) / 2)), int(round((quad[0, 1] + quad[1, 1]) / 2))  # mid top edge
        window = photo[max(0, top - 2):top + 3, max(0, x - 2):x + 3].reshape(-1, 3)
        return (np.abs(window.astype(int) - colour).sum(axis=1) < 60).any()

    assert colour_at(truth.quads[0], REFERENCE_COLOUR) and not colour_at(truth.quads[0], DEPLOYED_COLOUR)
    assert colour_at(deployed.quads[0], DEPLOYED_COLOUR)
    path = write_png(tmp_path / "worst.png", drawn)
    assert cv2.imread(str(path)).shape == drawn.shape
