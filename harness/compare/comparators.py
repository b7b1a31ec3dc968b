"""The comparators the harness ships (the protocol: :class:`harness.task_api.Comparator`): each
takes two results and a tolerance of its own type and returns a typed result that is true
unless it diverged. Check, compare, merge, diagnose, repeat, preflight and the fp16 fallback
judge arrays and top-k through these; a detector's boxes (:mod:`harness.detection.compare`),
an embedding's neighbours (:mod:`harness.task.embedding`) and a task's own comparators speak
the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness.compare.metrics import compare_arrays, quick_verdict, topk_metrics, topk_verdict, verdict
from harness.compare.ties import margin_verdict, reference_margin
from harness.scores import LOGITS, ScoreKind
from harness.stage import DEFAULT_TOP_K
from harness.task_api import Comparator, Comparison
from harness.tolerance import Tolerance
from harness.verdict import Verdict


@dataclass(frozen=True)
class ArrayComparison(Comparison):
    """Two arrays under the stage rule, with the |error| histogram (empty when the shapes differ)."""

    histogram: list[int] = field(default_factory=list)


class Arrays(Comparator):
    """The stage rule (:class:`harness.tolerance.Tolerance`): at most ``max_fraction`` of the
    values beyond ``atol + rtol * |reference|``, the mean error within ``mean_atol``, and for
    distributions the total variation within its bound. ``image``: 8-bit images (PSNR);
    ``distribution``: probabilities (total variation, Jensen-Shannon)."""

    tolerance_type = Tolerance

    def __init__(self, image: bool = False, distribution: bool = False):
        self.image, self.distribution = image, distribution

    def __call__(self, reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance) -> ArrayComparison:
        metrics, histogram = compare_arrays(reference, deployed, tolerance, self.image, self.distribution)
        return ArrayComparison(verdict(metrics, tolerance), metrics, histogram)

    @staticmethod
    def judge(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance) -> "Judged":
        """The same verdict, and the RMSE only: for loops that compare many times (repeat,
        diagnose's search, preflight's known answers, the fp16 fallback)."""
        found, rmse = quick_verdict(reference, deployed, tolerance)
        return Judged(found, {"rmse": rmse}, rmse)

    @staticmethod
    def rejudge(metrics: dict, tolerance: Tolerance) -> Verdict:
        """The verdict of metrics this comparator wrote (a saved run judged again)."""
        return verdict(metrics, tolerance)


@dataclass(frozen=True)
class Judged(Comparison):
    """:meth:`Arrays.judge`'s result: the verdict and the RMSE (inf when the shapes differ)."""

    rmse: float = 0.0


ARRAYS = Arrays()


@dataclass(frozen=True)
class TopKTolerance:
    """Top-k's rule: the same top-1 is ``close``, another within ``tie_margin`` of the
    reference's (in the units of ``scores``) a ``tie`` (:mod:`harness.compare.ties`)."""

    tie_margin: float
    k: int = DEFAULT_TOP_K
    scores: ScoreKind = LOGITS


class TopK(Comparator):
    """Classification's result: top-1 agreement, top-k overlap, the reference top-1's probability change."""

    tolerance_type = TopKTolerance

    def __call__(self, reference: np.ndarray, deployed: np.ndarray, tolerance: TopKTolerance) -> Comparison:
        metrics = topk_metrics(reference, deployed, tolerance.k, tolerance.scores)
        return Comparison(topk_verdict(metrics, tolerance.tie_margin), metrics)

    @staticmethod
    def rejudge(metrics: dict, tolerance: TopKTolerance) -> Verdict:
        return topk_verdict(metrics, tolerance.tie_margin)

    @staticmethod
    def flip(reference: np.ndarray | None, deployed_top1: int, tolerance: TopKTolerance) -> Comparison:
        """Another top-1 than the reference's, known only by its class (``harness accuracy`` keeps
        a deployed path's classes, not its scores), judged against the reference's scores as
        :meth:`__call__` judges it: ``tie`` or ``diverged`` by ``reference_margin`` (inf, a
        divergence, when the reference kept no scores)."""
        margin = math.inf if reference is None else reference_margin(reference, int(deployed_top1))
        return Comparison(margin_verdict(margin, tolerance.tie_margin), {"reference_margin": margin})


TOP_K = TopK()
SAME_DEPLOYMENT = TopKTolerance(tie_margin=-math.inf)
"""Top-k's rule for one deployment against itself (``harness repeat``): no top-1 change is a tie."""
