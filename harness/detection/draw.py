"""Boxes drawn on the photo: the reference's and the deployment's in two colours, for the report.

The reference's boxes are drawn first and thicker, the deployment's on top and thinner, so
where both agree one sees a blue box with an orange core, and a box only one side has
stands out in its own colour (Okabe-Ito blue and orange: told apart by colour-blind
readers too). A legend strip above the photo says which is which and counts the boxes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

from harness.detection.boxes import Detections

REFERENCE_COLOUR = (0, 114, 178)
"""RGB, Okabe-Ito blue."""
DEPLOYED_COLOUR = (230, 159, 0)
"""RGB, Okabe-Ito orange."""


def draw_detections(image_rgb: np.ndarray, sides: Sequence[tuple[str, Detections, tuple[int, int, int]]]) -> np.ndarray:
    """A copy of an HWC uint8 RGB photo with each side's quads drawn in its colour (first side
    thickest), under a legend strip naming the sides and their box counts."""
    canvas = np.ascontiguousarray(image_rgb[..., :3] if image_rgb.ndim == 3 else np.repeat(image_rgb[..., None], 3, 2))
    canvas = canvas.copy()
    height, width = canvas.shape[:2]
    base = max(1, round(min(height, width) / 300))
    for rank, (_, detections, colour) in enumerate(sides):
        thickness = base * (len(sides) - rank + 1) if rank == 0 else base
        for quad in detections.quads:
            points = np.round(quad).astype(np.int32).reshape(-1, 1, 2)
            cv2.polylines(canvas, [points], True, colour, thickness, cv2.LINE_AA)
    return np.concatenate([_legend(width, sides), canvas], axis=0)


SHOWN_WIDTH = 520
"""The width the report shows a drawing at (wider ones are scaled down to it)."""


def _legend(width: int, sides) -> np.ndarray:
    """The legend strip, drawn in proportion to the photo's width over :data:`SHOWN_WIDTH`, so
    every drawing's legend reads at one size in the report, whatever the photo's size."""
    k = max(width, SHOWN_WIDTH) / SHOWN_WIDTH

    def px(n: float) -> int:
        return max(1, round(n * k))

    line = px(22)
    strip = np.full((line * len(sides) + px(6), width, 3), 255, np.uint8)
    for i, (name, detections, colour) in enumerate(sides):
        y = line * (i + 1)
        cv2.rectangle(strip, (px(6), y - px(12)), (px(26), y - px(2)), colour, -1)
        cv2.putText(strip, f"{name}: {len(detections)} boxes", (px(32), y), cv2.FONT_HERSHEY_SIMPLEX, 0.45 * k,
                    (0, 0, 0), px(1), cv2.LINE_AA)
    return strip


def draw_comparison(image_rgb: np.ndarray, reference: Detections, deployed: Detections,
                    names: tuple[str, str] = ("reference", "deployment"),
                    texts: tuple[Sequence[str], Sequence[str]] | None = None) -> np.ndarray:
    """The two sides of one image in the report's colours; with ``texts`` (each side's words, one
    per box: an OCR pipeline's), each word written at its box: the reference's above it, the
    deployment's below, in red where it differs from the word of the reference's box it matches
    (IoU above 0.5) or has no match."""
    drawn = draw_detections(image_rgb, [(names[0], reference, REFERENCE_COLOUR), (names[1], deployed, DEPLOYED_COLOUR)])
    if texts is None:
        return drawn
    from harness.detection.boxes import greedy_match, iou_matrix

    legend = drawn.shape[0] - image_rgb.shape[0]
    pairs = dict((d, r) for r, d in greedy_match(iou_matrix(reference.quads, deployed.quads), reference.scores, 0.5))
    scale = max(image_rgb.shape[:2]) / 720 * 0.5
    for k, (side, words) in enumerate(zip((reference, deployed), texts)):
        for i, (quad, word) in enumerate(zip(side.quads, words)):
            changed = k == 1 and (i not in pairs or str(texts[0][pairs[i]]) != str(word))
            colour = (213, 0, 0) if changed else (REFERENCE_COLOUR, DEPLOYED_COLOUR)[k]
            x = int(quad[:, 0].min())
            y = int(quad[:, 1].min()) - 4 if k == 0 else int(quad[:, 1].max()) + int(14 * scale * 2)
            _label(drawn, _ascii(str(word)) or "(nothing)", (x, y + legend), colour, scale)
    return drawn


def _ascii(text: str) -> str:
    """OpenCV's Hershey fonts write ASCII only: other characters as '?'."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


def _label(canvas: np.ndarray, text: str, origin: tuple[int, int], colour, scale: float) -> None:
    """``text`` on a white backing at ``origin`` (its baseline's left end), kept inside the canvas."""
    thickness = max(1, round(scale * 2))
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    x = min(max(origin[0], 0), max(canvas.shape[1] - w, 0))
    y = min(max(origin[1], h + 1), canvas.shape[0] - base - 1)
    cv2.rectangle(canvas, (x, y - h - 1), (x + w, y + base), (255, 255, 255), -1)
    cv2.putText(canvas, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


def write_png(path: Path, image_rgb: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}")
    return path
