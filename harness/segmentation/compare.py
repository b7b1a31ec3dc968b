"""Two sides' segmentation results compared: one image's matte and mask at the source size
(:mod:`harness.segmentation.postprocess`'s [2, H, W]).

Metrics: IoU and Dice of the masks (two empty masks agree: 1.0), the boundary F-score
within :data:`BOUNDARY_PX` pixels, the matte's mean absolute error, the pixels flipped
(their count and share), and of those the ones *near the threshold*: where both sides'
matte lies within the margin of the mask's threshold. A class-index mask (argmax) flips
where the class differs; near means both sides' winning probability within the margin of
the two-class tie point.

Verdicts (:func:`compare_masks`, under a :class:`MaskTolerance`): ``equal`` (the same mask
and matte), ``close`` (at most ``max_flipped`` of the pixels flipped and the matte within
``max_matte_mae``), ``tie`` (more flipped, but every pixel beyond ``max_far`` of them only near
the threshold: the raw map's noise moved pixels that sat on the threshold), else
``diverged``. A tie is then held to the isolated postprocessing by the task
(:func:`harness.compare.ties.explained_by_upstream`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.task_api.answers import Judgement
from harness.verdict import Verdict

NEAR_THRESHOLD = 0.1
"""A flipped pixel whose matte lies within this of the threshold on both sides is near it (the
segmentation task's default margin)."""
BOUNDARY_PX = 2
"""The boundary F-score's tolerance: a boundary pixel matches within this distance."""


@dataclass(frozen=True)
class MaskTolerance:
    """The rules of one image's result (docs/segmentation.md measures them on real photos)."""

    max_flipped: float = 0.005
    """The share of the pixels whose mask may flip in a close image."""
    max_matte_mae: float = 0.01
    """The matte's mean absolute error (0 to 1) of a close image."""
    max_far: float = 0.001
    """The share of the pixels that may flip from beyond the margin in a tie."""
    threshold: float = 0.5
    """The mask's threshold on the matte (what a near-threshold flip is measured from)."""


def _boundary(mask: np.ndarray) -> np.ndarray:
    import cv2

    m = mask.astype(np.uint8)
    return (m - cv2.erode(m, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_CONSTANT, borderValue=0)) > 0


def boundary_f(reference: np.ndarray, deployed: np.ndarray, tolerance: int = BOUNDARY_PX) -> float:
    """The boundary F-score of two binary masks (each boundary's pixels matched within ``tolerance`` px)."""
    import cv2

    ref, dep = _boundary(reference), _boundary(deployed)
    if not ref.any() and not dep.any():
        return 1.0
    if not ref.any() or not dep.any():
        return 0.0
    disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * tolerance + 1, 2 * tolerance + 1))
    near_ref = cv2.dilate(ref.astype(np.uint8), disk) > 0
    near_dep = cv2.dilate(dep.astype(np.uint8), disk) > 0
    precision, recall = (dep & near_ref).sum() / dep.sum(), (ref & near_dep).sum() / ref.sum()
    return float(2 * precision * recall / (precision + recall)) if precision + recall else 0.0


def mask_metrics(reference: np.ndarray, deployed: np.ndarray, margin: float, threshold: float = 0.5) -> dict:
    """The metrics of two [2, H, W] results of one size (see the module docstring)."""
    ref_matte, ref_mask = reference[0], reference[1]
    dep_matte, dep_mask = deployed[0], deployed[1]
    binary = set(np.unique(ref_mask)) <= {0.0, 1.0} and set(np.unique(dep_mask)) <= {0.0, 1.0}
    ref_in, dep_in = ref_mask > 0, dep_mask > 0
    inter, union = int((ref_in & dep_in).sum()), int((ref_in | dep_in).sum())
    flipped = ref_mask != dep_mask
    near = flipped & (np.abs(ref_matte - threshold) <= margin) & (np.abs(dep_matte - threshold) <= margin)
    pixels = flipped.size
    return {
        "iou": inter / union if union else 1.0,
        "dice": 2 * inter / (int(ref_in.sum()) + int(dep_in.sum())) if union else 1.0,
        "boundary_f": boundary_f(ref_in, dep_in) if binary else None,
        "matte_mae": float(np.abs(ref_matte.astype(np.float64) - dep_matte).mean()),
        "flipped": int(flipped.sum()),
        "flipped_fraction": float(flipped.sum() / pixels),
        "near_threshold": int(near.sum()),
        "far_flipped": int((flipped & ~near).sum()),
        "reference_pixels": int(ref_in.sum()),
        "deployed_pixels": int(dep_in.sum()),
    }


def compare_masks(reference: np.ndarray, deployed: np.ndarray, margin: float,
                  tolerance: MaskTolerance = MaskTolerance()) -> tuple[Verdict, dict]:
    """The verdict and metrics of one image's two results (a size mismatch diverges, named)."""
    reference, deployed = np.asarray(reference, np.float32), np.asarray(deployed, np.float32)
    if reference.ndim != 3 or reference.shape[0] != 2:
        raise ValueError(f"a segmentation result is [2, H, W] (matte, mask), got {list(reference.shape)}")
    if deployed.shape != reference.shape:
        return Verdict.DIVERGED, {"problem": f"the deployed mask is {deployed.shape[-1]}x{deployed.shape[-2]}, the "
                                             f"reference's {reference.shape[-1]}x{reference.shape[-2]} (the source "
                                             "size): a mask of the wrong size", "iou": 0.0, "dice": 0.0}
    if not np.isfinite(deployed).all():
        return Verdict.DIVERGED, {"problem": "the deployed matte holds NaN or infinity", "iou": 0.0, "dice": 0.0}
    m = mask_metrics(reference, deployed, margin, tolerance.threshold)
    if m["flipped"] == 0 and m["matte_mae"] == 0:
        return Verdict.EQUAL, m
    if m["flipped_fraction"] <= tolerance.max_flipped and m["matte_mae"] <= tolerance.max_matte_mae:
        return Verdict.CLOSE, m
    if m["far_flipped"] <= tolerance.max_far * reference[1].size and m["matte_mae"] <= tolerance.max_matte_mae:
        return Verdict.TIE, m
    return Verdict.DIVERGED, m


# -- a served answer against the photo's answer alone (the load test, watch: harness.task.ANSWER_RULES) --

ANSWER_MASKS = ("MATTE", "MASK")
"""The outputs of a served segmenter's answer (this repository's ``segment_*`` ensembles)."""


def judge_answer(known, answer) -> Judgement:
    """A segmenter's served matte and mask against the known ones, by :func:`compare_masks` (margin
    :data:`NEAR_THRESHOLD`): a mask changed beyond the close rule, other than by pixels near the
    threshold, is a wrong answer; the error is the matte's."""

    def result(a) -> np.ndarray:
        matte = np.asarray(a[ANSWER_MASKS[0]], np.float32)
        return np.stack([matte, np.asarray(a[ANSWER_MASKS[1]], np.float32).reshape(matte.shape)])

    verdict, m = compare_masks(result(known), result(answer), NEAR_THRESHOLD)
    error = m.get("matte_mae", math.inf)
    if verdict is not Verdict.DIVERGED:
        return Judgement(None, error)
    return Judgement(m.get("problem") or f"mask IoU {m['iou']:.4f} with the photo's alone: {m['flipped']} pixels flipped "
                     f"({m['far_flipped']} far from the threshold), matte error {m['matte_mae']:.4g}", math.inf)
