"""Both sides' masks drawn on the photo for the report: the reference's contour and the
deployment's in two colours (Okabe-Ito blue and orange, as the detector's boxes), the pixels
whose mask flipped marked in magenta, under a legend strip."""

from __future__ import annotations

import cv2
import numpy as np

REFERENCE_COLOUR = (0, 114, 178)
DEPLOYED_COLOUR = (230, 159, 0)
FLIPPED_COLOUR = (204, 121, 167)
"""RGB: Okabe-Ito blue, orange and reddish purple."""


def draw_masks(photo_rgb: np.ndarray, reference: np.ndarray, deployed: np.ndarray) -> np.ndarray:
    """A copy of an HWC uint8 RGB photo with the flipped pixels tinted and both masks' contours
    drawn (the reference's thicker, under the deployment's), under a legend."""
    canvas = np.ascontiguousarray(photo_rgb[..., :3] if photo_rgb.ndim == 3 else np.repeat(photo_rgb[..., None], 3, 2))
    canvas = canvas.astype(np.uint8).copy()
    ref, dep = reference > 0, deployed > 0
    flipped = ref != dep
    canvas[flipped] = (0.4 * canvas[flipped] + 0.6 * np.array(FLIPPED_COLOUR)).astype(np.uint8)
    base = max(1, round(min(canvas.shape[:2]) / 300))
    for mask, colour, thickness in ((ref, REFERENCE_COLOUR, 3 * base), (dep, DEPLOYED_COLOUR, base)):
        contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(canvas, contours, -1, colour, thickness, cv2.LINE_AA)
    return np.concatenate([_legend(canvas.shape[1], int(ref.sum()), int(dep.sum()), int(flipped.sum())), canvas])


def _legend(width: int, reference: int, deployed: int, flipped: int) -> np.ndarray:
    k = max(width, 520) / 520
    line = max(1, round(22 * k))
    rows = ((f"reference: {reference} px", REFERENCE_COLOUR), (f"deployment: {deployed} px", DEPLOYED_COLOUR),
            (f"flipped: {flipped} px", FLIPPED_COLOUR))
    strip = np.full((line * len(rows) + max(1, round(6 * k)), width, 3), 255, np.uint8)
    for i, (text, colour) in enumerate(rows):
        y = line * (i + 1)
        cv2.rectangle(strip, (round(6 * k), y - round(12 * k)), (round(26 * k), y - round(2 * k)), colour, -1)
        cv2.putText(strip, text, (round(32 * k), y), cv2.FONT_HERSHEY_SIMPLEX, 0.45 * k, (0, 0, 0), max(1, round(k)),
                    cv2.LINE_AA)
    return strip
