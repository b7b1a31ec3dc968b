"""Scores of each path on the images every path classified: top-1/top-k accuracy, per-class
recall and precision (macro averages), flips against the reference (ties labelled), and
McNemar's exact test. Pure functions of the predictions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from harness.accuracy.dataset import Dataset, Sample, abbreviated
from harness.accuracy.predict import TOP_K, Predictions
from harness.compare.comparators import TOP_K as TOP_K_COMPARATOR
from harness.compare.comparators import TopKTolerance
from harness.compare.paired import McNemar, mcnemar_exact
from harness.outcome import Outcome
from harness.verdict import Verdict

# -- metrics (pure functions of arrays) -----------------------------------------------------

def top_k_accuracy(labels: np.ndarray, top_k: np.ndarray, k: int) -> float:
    """Share of images whose label is among the first k of their [images, >=k] predictions."""
    return float(np.mean(np.any(top_k[:, :k] == labels[:, None], axis=1)))


@dataclass(frozen=True)
class ClassScore:
    index: int
    name: str
    images: int
    recall: float
    precision: float
    """0.0 when the path never predicts the class (scikit-learn's ``zero_division=0``)."""


def class_scores(labels: np.ndarray, top1: np.ndarray, classes: Sequence[str]) -> tuple[ClassScore, ...]:
    """Recall and precision of each class present in ``labels``, by class index."""
    scores = []
    for index in np.unique(labels):
        hits = int(np.sum((top1 == index) & (labels == index)))
        images, predicted = int(np.sum(labels == index)), int(np.sum(top1 == index))
        scores.append(ClassScore(int(index), classes[index], images, hits / images, hits / predicted if predicted else 0.0))
    return tuple(scores)


def flip_count(reference_top1: np.ndarray, deployed_top1: np.ndarray) -> int:
    """Images whose top-1 class differs between the two paths."""
    return int(np.sum(reference_top1 != deployed_top1))


def flip_verdicts(samples: Sequence[Sample], reference: Predictions, deployed: Predictions,
                  tie_margin: float) -> dict[str, tuple[str, float]]:
    """Image name -> ("tie" or "diverged", reference margin in logits), for each image whose
    top-1 class the deployed path changes, as the top-k comparator judges it (:meth:`TopK.flip`:
    the margin is inf where the reference kept no logits, a divergence)."""
    out = {}
    for s in samples:
        ref_top1, dep_top1 = reference.top_k[s.name][0], deployed.top_k[s.name][0]
        if ref_top1 == dep_top1:
            continue
        flip = TOP_K_COMPARATOR.flip(reference.logits.get(s.name), dep_top1, TopKTolerance(tie_margin))
        out[s.name] = (flip.verdict.value, flip.metrics["reference_margin"])
    return out


def outcome_of(reference_failed: bool, deployed_failed: Sequence[bool]) -> Outcome:
    """How an image that failed somewhere is labelled: rejected by deployment when the
    reference classified it and some deployed path did not; rejected by training when the
    reference failed and some deployed path classified it; else failed."""
    if not reference_failed:
        return Outcome.REJECTED_BY_DEPLOYMENT
    return Outcome.REJECTED_BY_TRAINING if not all(deployed_failed) else Outcome.FAILED


# -- the evaluation ------------------------------------------------------------------------

@dataclass(frozen=True)
class PathScore:
    """One path's scores on the evaluated images; accuracy fields are None without labels,
    comparison fields None for the reference itself."""

    path: str
    top1: float | None
    topk: float | None
    """Top-k accuracy, k = :attr:`AccuracyResult.k`."""
    recall: float | None
    """Macro average over the classes present in the dataset."""
    precision: float | None
    """Macro average over the classes present in the dataset."""
    per_class: tuple[ClassScore, ...]
    flips: int | None
    """Every image whose top-1 class differs from the reference's, ties included."""
    flip_rate: float | None
    mcnemar: McNemar | None
    ties: int | None = None
    """Of the flips, those within the tie margin (see :mod:`harness.compare.ties`)."""
    flip_verdicts: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """Flipped image -> ("tie" or "diverged", reference margin in logits)."""

    @property
    def diverged_flips(self) -> int | None:
        return None if self.flips is None else self.flips - (self.ties or 0)


@dataclass(frozen=True)
class AccuracyResult:
    dataset: Dataset
    scores: tuple[PathScore, ...]
    """The reference first, then the deployed paths."""
    evaluated: tuple[Sample, ...]
    """The images every path classified: the only ones scored, on every path."""
    failed: Mapping[str, str]
    """Image name -> the reasons it failed, per path ("dali: truncated JPEG ..."): every
    image left out, whatever its outcome."""
    predictions: Mapping[str, Mapping[str, tuple[int, ...]]]
    """Path -> image name -> top-k class indices."""
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)
    """Image name -> "failed", "rejected by deployment" or "rejected by training", for each
    image of ``failed`` (see :func:`outcome_of`)."""
    tie_margin: float = 0.0
    k: int = TOP_K
    """Classes per image in ``predictions`` and in top-k accuracy."""

    def rejected(self, side: str) -> int:
        return sum(o == Outcome.rejected_by(side) for o in self.outcomes.values())


def evaluate(dataset: Dataset, predictions: Sequence[Predictions], classes: Sequence[str],
             tie_margin: float = 0.0, k: int = TOP_K) -> AccuracyResult:
    """Score every path on the images that none failed; ``predictions[0]`` is the reference.
    ``tie_margin`` in logits (the CLI passes the output tolerance; 0.0 here: only an exact
    tie is a tie); ``k``: top-k accuracy (default 5; the predictions hold at least k classes)."""
    reasons: dict[str, list[str]] = {}
    for p in predictions:
        for name, reason in p.failed.items():
            reasons.setdefault(name, []).append(f"{p.path}: {reason}")
    evaluated = tuple(s for s in dataset.samples if s.name not in reasons)
    missing = [s.name for s in evaluated if any(s.name not in p.top_k for p in predictions)]
    if missing:  # every image in is an image reported
        raise RuntimeError(f"{len(missing)} images neither predicted nor failed: {abbreviated(missing)}")
    failed = {s.name: "; ".join(reasons[s.name]) for s in dataset.samples if s.name in reasons}
    outcomes = {name: outcome_of(name in predictions[0].failed, [name in p.failed for p in predictions[1:]])
                for name in failed}
    top_k = {p.path: _top_k_matrix(p, evaluated, k) for p in predictions}
    labels = np.array([s.label for s in evaluated], dtype=np.int64) if dataset.labeled else None
    reference = predictions[0].path
    scores = []
    for p in predictions:
        top1 = top_k[p.path][:, 0]
        compared = p.path != reference
        flips = flip_count(top_k[reference][:, 0], top1) if compared else None
        verdicts = flip_verdicts(evaluated, predictions[0], p, tie_margin) if compared else {}
        ties = sum(v == Verdict.TIE.value for v, _ in verdicts.values()) if compared else None
        if labels is None or not len(evaluated):
            scores.append(PathScore(p.path, None, None, None, None, (), flips, _rate(flips, len(evaluated)), None,
                                    ties, verdicts))
            continue
        per_class = class_scores(labels, top1, classes)
        mcnemar = mcnemar_exact(top_k[reference][:, 0] == labels, top1 == labels) if compared else None
        scores.append(PathScore(
            p.path, top_k_accuracy(labels, top_k[p.path], 1), top_k_accuracy(labels, top_k[p.path], k),
            float(np.mean([c.recall for c in per_class])), float(np.mean([c.precision for c in per_class])),
            per_class, flips, _rate(flips, len(evaluated)), mcnemar, ties, verdicts))
    return AccuracyResult(dataset, tuple(scores), evaluated, failed,
                          {p.path: {s.name: p.top_k[s.name][:k] for s in evaluated} for p in predictions}, outcomes,
                          tie_margin, k)


def _top_k_matrix(predictions: Predictions, samples: Sequence[Sample], k: int) -> np.ndarray:
    """[images, k] class indices, best first (also when no image is left)."""
    rows = [predictions.top_k[s.name][:k] for s in samples]
    return np.array(rows, np.int64) if rows else np.zeros((0, k), np.int64)


def _rate(count: int | None, total: int) -> float | None:
    return count / total if count is not None and total else None
