"""What a deployment's class scores hold, in one place: :class:`ScoreKind`, ``logits`` or
``probabilities``.

A kind says how the reference's logits become comparable scores (as they are, or their
softmax: never a softmax of probabilities), the units its tolerances and tie margin are in,
the output stage's default rule, and the metrics that see a wrong distribution. The rules:

- **logits**: the spec's output rule (:data:`harness.compare.tolerance.DEFAULT_TOLERANCES`:
  0.5 logits, a quarter of the classes may exceed it, mean within 0.5); the tie margin 0.5 logits.
- **probabilities**: every class's probability within :data:`PROBABILITY_ATOL` and the total
  variation distance (half the summed absolute difference: the probability mass that moved)
  within :data:`PROBABILITY_TV`; the tie margin :data:`PROBABILITY_ATOL` (probability).
  Measured on the 65 corpus photos, EfficientNet-Lite0 (``docs/probabilities.md``): the
  aligned DALI deployment moves a class by at most 0.034 and the mass by at most 0.035; a
  1-level decoder difference (Pillow's YCbCr->RGB against libjpeg's) by at most 0.037 and
  0.148 (one low-confidence image); none of them is diverged by this rule, while a channel
  swap diverges 26 images, a resize-filter difference 29, a stretch 65, ImageNet mean/std 62.
  The logits' 0.02-per-class with a quarter of the classes allowed beyond it was blind: 1000
  small probabilities meet it whatever happens to the few that matter.

A task layer (issue 26) can take this module as classification's output comparison. Part of
the vocabulary at the bottom: numpy and the harness's own vocabulary only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.formatting import fmt
from harness.tolerance import Tolerance

PROBABILITY_ATOL = 0.05
"""Largest change of any class's probability an aligned deployment shows (see the module)."""
PROBABILITY_TV = 0.2
"""Largest total variation distance an aligned deployment shows (see the module)."""


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, stable for large logits."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


SCORE_KINDS: dict[str, "ScoreKind"] = {}
"""Every kind made, by name (those below, and each task's own)."""


@dataclass(frozen=True)
class ScoreKind:
    """What a scores output holds."""

    name: str
    """``logits`` or ``probabilities`` (as reports and files say it)."""
    unit: str
    """The unit a margin or a tolerance of these scores is in (``logits``, ``probability``)."""
    distribution: bool
    """The scores are probabilities already (a softmax of them would be wrong)."""

    def __post_init__(self):
        # Known by name from its making on (a task's own kind, made in its module, as much as
        # these): a run's report names the kind it compared, and reading it back looks it up.
        SCORE_KINDS.setdefault(self.name, self)

    def from_logits(self, logits: np.ndarray) -> np.ndarray:
        """The reference model's logits as scores of this kind (float32)."""
        logits = np.asarray(logits)
        return softmax(logits.astype(np.float64)).astype(np.float32) if self.distribution else logits

    def probabilities(self, scores: np.ndarray) -> np.ndarray:
        """Scores of this kind as probabilities (float64): probabilities as they are, logits by softmax."""
        scores = np.asarray(scores, np.float64)
        return scores if self.distribution else softmax(scores)

    def default_tolerance(self) -> Tolerance | None:
        """The output stage's rule for these scores (see the module); None: the spec's output
        rule, which is in logits (:mod:`harness.compare.tolerance`)."""
        return Tolerance(atol=PROBABILITY_ATOL, max_total_variation=PROBABILITY_TV) if self.distribution else None

    def describe(self, value: float) -> str:
        """``0.5 logits``, ``0.05 probability``: a margin or tolerance with its unit."""
        return f"{fmt(value)} {self.unit}"


LOGITS = ScoreKind("logits", "logits", distribution=False)
PROBABILITIES = ScoreKind("probabilities", "probability", distribution=True)
EMBEDDING = ScoreKind("embedding", "cosine similarity", distribution=False)
"""Not class scores: the embedding task's features (:mod:`harness.task.embedding`), compared as
they are; its margin is in cosine similarity and its output rule is the task's."""
DETECTION = ScoreKind("detection", "score", distribution=False)
"""Not class scores: a detector's raw output (a text probability map, a raw head), compared as
it is (:mod:`harness.task.detection`); its margin is in the boxes' score units."""


def score_kind(name: str | ScoreKind) -> ScoreKind:
    """The kind named ``name`` (a kind is returned as it is)."""
    return name if isinstance(name, ScoreKind) else SCORE_KINDS[name]


def detect(output_name: str, scores: np.ndarray) -> ScoreKind:
    """``probabilities`` when the output is named so (prob, softmax) or when every row is a
    distribution (non-negative, summing to 1), else ``logits``."""
    lowered = output_name.lower()
    if "prob" in lowered or "softmax" in lowered:
        return PROBABILITIES
    rows = np.asarray(scores, np.float64).reshape(-1, np.asarray(scores).shape[-1])
    if rows.min() >= 0 and rows.max() <= 1 and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):
        return PROBABILITIES
    return LOGITS


def distribution_metrics(reference: np.ndarray, deployed: np.ndarray) -> dict:
    """Two probability vectors compared as distributions: ``total_variation`` (half the summed
    absolute difference) and ``js_divergence`` (Jensen-Shannon, natural log, 0..ln 2)."""
    p, q = np.asarray(reference, np.float64).ravel(), np.asarray(deployed, np.float64).ravel()
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        keep = a > 0
        return float(np.sum(a[keep] * np.log(a[keep] / m[keep])))

    js = 0.5 * kl(p) + 0.5 * kl(q)
    return {"total_variation": 0.5 * float(np.abs(p - q).sum()), "js_divergence": max(0.0, js) if math.isfinite(js)
            else math.inf}
