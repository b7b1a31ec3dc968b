"""Two sides' boxes of one image compared: matched one to one, what is missed or extra, how
far the matches moved, and a verdict from documented rules (:class:`DetectionTolerance`).

Matching: the reference's boxes in descending score order, each takes the deployed box of
highest IoU above ``match_iou`` not yet taken (of the same class where both sides have
classes). Verdict, first rule that applies:

1. ``diverged`` when a score or a corner is not finite, or a box lies outside the image;
2. ``equal`` when both sides found nothing (zero boxes on both sides is agreement), or every
   box matched one with the same corners and score;
3. ``diverged`` when a box is missed or extra and is not a near-threshold change, or a match
   moved too far (its worst corner more than ``corner_px`` source pixels AND its IoU below
   ``close_iou``: small boxes are judged by pixels, since one pixel costs a 10-pixel word a
   quarter of its IoU, large ones by overlap) and that is not explained near a threshold
   either, or its score changed more than ``score_atol`` (where the deployment answers box
   scores: an OCR model's boxes may have none, ``scored`` False);
4. ``tie`` when every box missed, extra or moved too far is a near-threshold change: listed,
   not failed, as a near-tie top-1 change is in classification;
5. ``close`` otherwise.

A change is **near a threshold** when its score is within ``near_threshold`` of the
postprocessor's score threshold, or when the caller's ``explained`` says so for its region (a
DB map's pixels there crossed the binarization threshold only by as much as the raw output's
error: :mod:`harness.task.detection`), since a box appears, disappears, splits or merges
there by noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from harness.detection.boxes import Detections, greedy_match, iou_matrix
from harness.postprocessing import DbParams
from harness.task_api import Comparator, Judgement
from harness.verdict import Verdict


@dataclass(frozen=True)
class DetectionTolerance:
    """The documented defaults; corner errors in the source image's pixels."""

    match_iou: float = 0.5
    """Two boxes are the same object when their IoU exceeds this (ICDAR's and COCO's 0.5)."""
    close_iou: float = 0.9
    """A match overlapping at least this much is ``close`` (whatever its corners did)."""
    corner_px: float = 4.0
    """A match whose corners moved at most this is ``close`` (whatever its IoU; a resize
    kernel's rounding moves boxes by 1-3 px)."""
    score_atol: float = 0.15
    """Largest score change of a ``close`` match (an aligned deployment's largest, on the
    ImageNet sample's 171 photos with text: 0.11; benchmarks/detection_rule.py)."""
    near_threshold: float = 0.05
    """A box that appears or disappears with a score within this of the threshold is a
    near-threshold change."""
    outside_px: float = 1.0
    """How far beyond the image a corner may lie before it is a problem."""

    def moved(self, iou: float, corner_px: float) -> bool:
        """The close rule, the one place it is written: a match moved beyond it when it overlaps
        less than :attr:`close_iou` *and* its corners moved more than :attr:`corner_px`."""
        return iou < self.close_iou and corner_px > self.corner_px


@dataclass(frozen=True)
class BoxMatch:
    reference: int
    """Index of the box in the reference's detections."""
    deployed: int
    iou: float
    corner_px: float
    """Largest distance between corresponding corners (the best of the 4 cyclic pairings)."""
    score_delta: float
    """Deployed score - reference score."""
    near_threshold: bool = False
    """Moved too far, but near a threshold (see the module): a tie, not a divergence."""

    def beyond(self, t: "DetectionTolerance", scored: bool = True) -> bool:
        """Whether this match diverges by the rules (see the module): moved beyond the close rule
        and not near a threshold, or (``scored``) its score changed by more than ``score_atol``."""
        moved = t.moved(self.iou, self.corner_px) and not self.near_threshold
        return moved or (scored and not abs(self.score_delta) <= t.score_atol)


@dataclass(frozen=True)
class BoxChange:
    """A box only one side has."""

    index: int
    """Index in that side's detections."""
    score: float
    near_threshold: bool


@dataclass(frozen=True)
class DetectionComparison:
    verdict: Verdict
    reference_boxes: int
    deployed_boxes: int
    matches: tuple[BoxMatch, ...] = ()
    missed: tuple[BoxChange, ...] = ()
    """Reference boxes the deployment did not find."""
    extra: tuple[BoxChange, ...] = ()
    """Deployed boxes the reference did not find."""
    problems: tuple[str, ...] = ()
    """Why the output cannot be trusted (non-finite values, boxes outside the image)."""

    def __bool__(self) -> bool:
        """True unless diverged (the comparison protocol, :class:`harness.task_api.Comparison`)."""
        return self.verdict is not Verdict.DIVERGED

    @property
    def metrics(self) -> dict:
        """One image's comparison as a stage's metrics: counts and measures aggregate over images
        (worst and mean), the lists are this image's details (in images.jsonl)."""
        return {
            "reference_boxes": self.reference_boxes, "deployed_boxes": self.deployed_boxes,
            "matched": len(self.matches), "missed": len(self.missed), "extra": len(self.extra),
            "near_threshold": len(self.near_threshold), "min_iou": self.worst_iou, "mean_iou": self.mean_iou,
            "worst_corner_px": self.worst_corner_px, "max_score_delta": _finite(self.max_score_delta),
            "problems": len(self.problems),
            # the ranking of the worst images: a box missed or extra first, then how far boxes moved
            "severity": 1000.0 * (len(self.missed) + len(self.extra) + len(self.problems))
            + (self.worst_corner_px or 0.0),
            "missed_scores": [_finite(b.score) for b in self.missed],
            "extra_scores": [_finite(b.score) for b in self.extra], "problem_lines": list(self.problems),
        }

    @property
    def mean_iou(self) -> float | None:
        return float(np.mean([m.iou for m in self.matches])) if self.matches else None

    @property
    def worst_iou(self) -> float | None:
        return min((m.iou for m in self.matches), default=None)

    @property
    def worst_corner_px(self) -> float | None:
        return max((m.corner_px for m in self.matches), default=None)

    @property
    def max_score_delta(self) -> float | None:
        """The largest score change of a match, sign kept."""
        return max((m.score_delta for m in self.matches if math.isfinite(m.score_delta)), key=abs, default=None)

    @property
    def near_threshold(self) -> tuple[tuple[str, BoxChange | BoxMatch], ...]:
        """("missed", "extra" or "moved", change) of each near-threshold change."""
        return tuple((kind, c) for kind, changes in (("missed", self.missed), ("extra", self.extra),
                                                     ("moved", self.matches))
                     for c in changes if c.near_threshold)

    def events(self) -> list[str]:
        """One line per thing a user would want to hear about this image."""
        lines = list(self.problems)
        for kind, changes in (("missed", self.missed), ("extra", self.extra)):
            for c in changes:
                note = " (near the threshold)" if c.near_threshold else ""
                score = f" (score {c.score:.3f})" if math.isfinite(c.score) else ""
                lines.append(f"{kind} box {c.index}{score}{note}")
        delta = _finite(self.max_score_delta)
        if self.matches and (self.worst_corner_px or delta):
            lines.append(f"{len(self.matches)} matched: worst IoU {self.worst_iou:.3f}, corners moved up to "
                         f"{self.worst_corner_px:.1f} px" + (f", score change up to {delta:+.3f}" if delta else ""))
        return lines

    def to_dict(self) -> dict:
        """Plain JSON (no NaN: summaries of no match are None)."""
        return {
            "verdict": self.verdict.value, "reference_boxes": self.reference_boxes, "deployed_boxes": self.deployed_boxes,
            "matched": len(self.matches), "missed": len(self.missed), "extra": len(self.extra),
            "near_threshold": len(self.near_threshold), "mean_iou": self.mean_iou, "worst_iou": self.worst_iou,
            "worst_corner_px": self.worst_corner_px, "max_score_delta": _finite(self.max_score_delta),
            "matches": [[m.reference, m.deployed, m.iou, m.corner_px, _finite(m.score_delta), m.near_threshold]
                        for m in self.matches],
            "missed_boxes": [[c.index, _finite(c.score), c.near_threshold] for c in self.missed],
            "extra_boxes": [[c.index, _finite(c.score), c.near_threshold] for c in self.extra],
            "problems": list(self.problems),
        }

    @staticmethod
    def from_dict(d: dict) -> "DetectionComparison":
        def changes(rows):
            return tuple(BoxChange(int(i), math.nan if s is None else float(s), bool(n)) for i, s, n in rows)

        return DetectionComparison(
            Verdict(d["verdict"]), int(d["reference_boxes"]), int(d["deployed_boxes"]),
            tuple(BoxMatch(int(r), int(p), float(i), float(c), math.nan if s is None else float(s), bool(n and n[0]))
                  for r, p, i, c, s, *n in d["matches"]),
            changes(d["missed_boxes"]), changes(d["extra_boxes"]), tuple(d["problems"]))


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def corner_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Largest distance between corresponding corners of two [4, 2] quads, for the cyclic
    pairing that makes it smallest (so a quad whose first corner moved to the next is not a
    90-degree turn)."""
    return float(min(np.max(np.linalg.norm(a - np.roll(b, k, axis=0), axis=1)) for k in range(4)))


def problems_of(side: str, d: Detections, image_size: tuple[int, int] | None, tolerance: DetectionTolerance,
                scored: bool = True) -> list[str]:
    out = []
    bad_scores = int(np.sum(~np.isfinite(d.scores))) if scored else 0
    if bad_scores:
        out.append(f"{side}: {bad_scores} of {len(d)} scores are not finite")
    bad_quads = int(np.sum(~np.isfinite(d.quads).all(axis=(1, 2))))
    if bad_quads:
        out.append(f"{side}: {bad_quads} of {len(d)} boxes have a corner that is not finite")
    if image_size is not None and len(d):
        height, width = image_size
        x, y, m = d.quads[..., 0], d.quads[..., 1], tolerance.outside_px
        with np.errstate(invalid="ignore"):
            outside = int(np.sum(((x < -m) | (x > width + m) | (y < -m) | (y > height + m)).any(axis=1)))
        if outside:
            out.append(f"{side}: {outside} of {len(d)} boxes reach outside the {width}x{height} image")
    return out


class Boxes(Comparator):
    """A detector's result as a comparator (the protocol: :class:`harness.task_api.Comparator`):
    one image's boxes under a :class:`DetectionTolerance` (:func:`compare_detections`), given
    the postprocessor's score threshold, the source ``image_size`` and the raw outputs'
    evidence of near-threshold changes (``explained``)."""

    tolerance_type = DetectionTolerance

    def __init__(self, threshold: float, image_size: tuple[int, int] | None = None,
                 explained: Callable[[np.ndarray], bool] | None = None, scored: bool = True):
        self.threshold, self.image_size, self.explained = threshold, image_size, explained
        self.scored = scored

    def __call__(self, reference: Detections, deployed: Detections,
                 tolerance: DetectionTolerance = DetectionTolerance()) -> "DetectionComparison":
        return compare_detections(reference, deployed, self.threshold, tolerance, self.image_size,
                                  self.explained, self.scored)


def compare_detections(reference: Detections, deployed: Detections, threshold: float,
                       tolerance: DetectionTolerance = DetectionTolerance(),
                       image_size: tuple[int, int] | None = None,
                       explained: Callable[[np.ndarray], bool] | None = None,
                       scored: bool = True) -> DetectionComparison:
    """Compare one image's boxes (see the module's rules). ``threshold``: the postprocessor's
    score threshold (its record's, :mod:`harness.postprocessing`); ``image_size``: (height,
    width) of the source image, to catch boxes outside it; ``explained(quads)``: whether a
    change over those [N, 4, 2] quads (source pixels) lies near a threshold by the raw
    outputs' evidence (None: by the score only); ``scored`` False: the deployment answers no
    box scores (NaN), so none is judged (no score change, and a box only it has is near a
    threshold by the evidence alone)."""
    t = tolerance
    problems = problems_of("reference", reference, image_size, t) + problems_of("deployed", deployed, image_size, t,
                                                                                scored)
    finite_ref = np.isfinite(reference.quads).all(axis=(1, 2))
    finite_dep = np.isfinite(deployed.quads).all(axis=(1, 2))
    iou = iou_matrix(np.nan_to_num(reference.quads), np.nan_to_num(deployed.quads))
    iou[~finite_ref] = 0.0
    iou[:, ~finite_dep] = 0.0
    same_class = None
    if reference.classes is not None and deployed.classes is not None:
        same_class = reference.classes[:, None] == deployed.classes[None, :]
    pairs = greedy_match(iou, reference.scores, t.match_iou, same_class)
    near = explained or (lambda quads: False)
    matches = tuple(judge_match(reference, deployed, r, d, float(iou[r, d]), t, explained) for r, d in pairs)

    def unmatched(d: Detections, taken: set[int]) -> tuple[BoxChange, ...]:
        return tuple(BoxChange(i, float(d.scores[i]), bool(abs(d.scores[i] - threshold) <= t.near_threshold
                                                           or (np.isfinite(d.quads[i]).all() and near(d.quads[i][None]))))
                     for i in range(len(d)) if i not in taken)

    missed = unmatched(reference, {r for r, _ in pairs})
    extra = unmatched(deployed, {d for _, d in pairs})
    verdict = _verdict(matches, missed, extra, problems, t, scored)
    return DetectionComparison(verdict, len(reference), len(deployed), matches, missed, extra, tuple(problems))


def judge_match(reference: Detections, deployed: Detections, r: int, d: int, iou: float,
                tolerance: DetectionTolerance = DetectionTolerance(),
                explained: Callable[[np.ndarray], bool] | None = None) -> BoxMatch:
    """The reference's box ``r`` matched to the deployment's ``d`` (their ``iou``), judged by the
    rules (see the module): how far it moved, its score change, and whether a move beyond the
    close rule lies near a threshold by ``explained``'s evidence. Every judge of a matched box
    asks this (the boxes' comparison, and OCR's for the word a box changed)."""
    t = tolerance
    corner = corner_distance(reference.quads[r], deployed.quads[d])
    near = bool(t.moved(iou, corner) and explained is not None and explained(np.stack([reference.quads[r], deployed.quads[d]])))
    return BoxMatch(r, d, iou, corner, float(deployed.scores[d] - reference.scores[r]), near)


def _verdict(matches, missed, extra, problems, t: DetectionTolerance, scored: bool = True) -> Verdict:
    if problems:
        return Verdict.DIVERGED
    if not missed and not extra and all(m.corner_px == 0 and (m.score_delta == 0 or not scored) for m in matches):
        return Verdict.EQUAL
    far = [c for c in missed + extra if not c.near_threshold]
    moved = [m for m in matches if m.beyond(t, scored)]
    if far or moved:
        return Verdict.DIVERGED
    return Verdict.TIE if missed or extra or any(m.near_threshold for m in matches) else Verdict.CLOSE



# -- a served answer against the photo's answer alone (the load test, watch: harness.task.ANSWER_RULES) --

DB_BOX_THRESHOLD = DbParams().box_thresh
"""The score threshold a served detector's boxes are judged near (the DB postprocessing's
default, this repository's): a box that comes or goes within 0.05 of it is a tie."""
ANSWER_BOXES = ("BOXES", "SCORES")
"""The outputs of a served detector's answer (this repository's ``detect_*`` ensembles)."""


def judge_answer(known, answer):
    """A detector's served boxes against the known ones, by :func:`compare_detections`: a
    :class:`harness.task_api.Judgement` (error: the worst corner's move, inf when a box came or went)."""
    boxes, scores = ANSWER_BOXES
    comparison = compare_detections(Detections(known[boxes], known[scores]), Detections(answer[boxes], answer[scores]),
                                    DB_BOX_THRESHOLD)
    worst = max((m.corner_px for m in comparison.matches), default=0.0)
    error = math.inf if comparison.missed or comparison.extra else worst
    if comparison.verdict is not Verdict.DIVERGED:
        return Judgement(None, error)
    return Judgement(f"{len(answer[scores])} boxes where the photo alone answers {len(known[scores])}: "
                     f"{len(comparison.missed)} missed, {len(comparison.extra)} extra, worst corner moved {worst:.1f} px"
                     + (f"; {'; '.join(comparison.problems)}" if comparison.problems else ""), error)
