"""Streaming aggregation over images: memory stays flat however many images there are.

Each metric keeps its worst value (max for errors; min for PSNR, cosine, SQNR and
agreement) and its mean; verdicts are counted; histograms summed; the ``worst`` few
image names per stage are kept by their largest absolute error.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from harness.result import SIDES, ImageResult, StageResult
from harness.results import CheckSummary, Flip, ImageIssue, MetricSummary, StageStats
from harness.stage import STAGES, Stage
from harness.verdict import Verdict

HIGHER_IS_BETTER = {"psnr_db", "cosine", "sqnr_db", "top1_agree", "topk_overlap", "same_order", "min_iou", "mean_iou",
                    "iou", "dice", "boundary_f"}
SIGNED = {"top1_prob_change", "max_score_delta"}
"""Signed metrics: the worst is the one furthest from zero, either way."""
NOT_AGGREGATED = {"reference_shape", "deployed_shape", "reference_top1", "deployed_top1", "k", "reference_margin",
                  "severity"}
"""Per-image facts, not measures (the reference margin matters only on flipped images: see
:attr:`RunSummary.flips`; a task's ``severity`` ranks its worst images)."""
WORST_KEPT = 5


@dataclass
class MetricStats:
    worst: float
    total: Fraction = Fraction(0)
    """The exact sum of the finite values: the mean does not depend on the order images come
    in (threads, or a run resumed), so a resumed report equals an uninterrupted one."""
    count: int = 0

    def add(self, key: str, value: float) -> None:
        if key in SIGNED:
            self.worst = max(self.worst, value, key=abs)
        elif key in HIGHER_IS_BETTER:
            self.worst = min(self.worst, value)
        else:
            self.worst = max(self.worst, value)
        if math.isfinite(value):
            self.total += Fraction(value)
            self.count += 1

    def freeze(self) -> MetricSummary:
        return MetricSummary(self.worst, float(self.total / self.count) if self.count else self.worst, self.count)


def _add_metrics(stats: dict[str, MetricStats], metrics: dict) -> None:
    for key, value in metrics.items():
        if key in NOT_AGGREGATED or not isinstance(value, (int, float)):
            continue
        if key not in stats:
            stats[key] = MetricStats(worst=value)
        stats[key].add(key, float(value))


@dataclass
class StageSummary:
    name: Stage
    verdicts: Counter = field(default_factory=Counter)
    isolated_verdicts: Counter = field(default_factory=Counter)
    metrics: dict[str, MetricStats] = field(default_factory=dict)
    isolated: dict[str, MetricStats] = field(default_factory=dict)
    histogram: list[int] = field(default_factory=list)
    worst_images: list[tuple[float, str]] = field(default_factory=list)

    def add(self, image: str, result: StageResult) -> None:
        self.verdicts[result.verdict.value] += 1
        _add_metrics(self.metrics, result.metrics)
        if result.isolated is not None:
            self.isolated_verdicts[result.isolated_verdict.value] += 1
            _add_metrics(self.isolated, result.isolated)
        if result.histogram:
            if not self.histogram:
                self.histogram = [0] * len(result.histogram)
            self.histogram = [a + b for a, b in zip(self.histogram, result.histogram)]
        score = severity(result)
        if len(self.worst_images) < WORST_KEPT:
            heapq.heappush(self.worst_images, (score, image))
        else:
            heapq.heappushpop(self.worst_images, (score, image))

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(Verdict(v) for v in self.verdicts)

    def freeze(self) -> StageStats:
        return StageStats(
            self.name, self.verdict, _by_verdict(self.verdicts), {k: v.freeze() for k, v in self.metrics.items()},
            {k: v.freeze() for k, v in self.isolated.items()} or None,
            Verdict.worst(Verdict(v) for v in self.isolated_verdicts) if self.isolated_verdicts else None,
            _by_verdict(self.isolated_verdicts) or None, tuple(self.histogram),
            tuple(name for _, name in sorted(self.worst_images, reverse=True)))


def _by_verdict(counts: Counter) -> dict[str, int]:
    """Verdict counts in the verdicts' order, whatever order the images came in."""
    return {v.value: counts[v.value] for v in Verdict if v.value in counts}


def severity(result: StageResult) -> float:
    """How bad one image's stage is, for ranking the worst images."""
    m = result.metrics
    if m.get("shape_mismatch"):
        return math.inf
    if "severity" in m:  # a task's own ranking (a detector's: boxes missed or extra, then how far they moved)
        return float(m["severity"])
    if result.stage is Stage.TOPK:
        return (1 - m["top1_agree"]) * 10 + abs(m["top1_prob_change"])
    return m.get("max_abs", 0.0) + m.get("mean_abs", 0.0)


class TopKFlips:
    """Classification's events (:meth:`harness.task.Task.events`): every image whose top-1
    class changed, a tie or a divergence, with the reference's margin."""

    task = "classification"
    flips_are_events = True
    """The events are top-1 flips: the summary keeps them as its ``flips`` too (reports before tasks)."""

    def __init__(self):
        self.flips: list[Flip] = []

    def add(self, result: ImageResult) -> None:
        top = result.stage(Stage.TOPK)
        if top is not None and top.verdict in (Verdict.TIE, Verdict.DIVERGED):
            m = top.metrics
            self.flips.append(Flip(result.image, top.verdict, m["reference_top1"], m["deployed_top1"],
                                   m["reference_margin"]))

    def result(self) -> tuple[tuple, dict]:
        return tuple(sorted(self.flips, key=lambda f: f.image)), {}


class RunSummary:
    """Everything a report needs, folded one :class:`ImageResult` at a time; :meth:`result`
    freezes it into the typed :class:`harness.results.CheckSummary` the writers read.
    ``events``: the task's fold of the images into its events (default: classification's
    :class:`TopKFlips`; see :meth:`harness.task.Task.events`)."""

    def __init__(self, events=None):
        self.stages = {name: StageSummary(name) for name in STAGES}
        self.compared = 0
        self.failed: list[ImageIssue] = []
        self.skipped: list[ImageIssue] = []
        self.rejected: dict[str, list[ImageIssue]] = {side: [] for side in SIDES}
        self.events = events if events is not None else TopKFlips()
        self.first_divergent = Counter()

    def add(self, result: ImageResult) -> None:
        if result.skipped:
            self.skipped.append(ImageIssue(result.image, result.error))
            return
        if result.rejected_by:
            self.rejected[result.rejected_by].append(ImageIssue(result.image, result.error))
            return
        if result.failed:
            self.failed.append(ImageIssue(result.image, result.error))
            return
        self.compared += 1
        for stage in result.stages:
            self.stages[stage.stage].add(result.image, stage)
        self.first_divergent[result.first_divergent or "none"] += 1
        self.events.add(result)

    def result(self) -> CheckSummary:
        """What was folded so far, frozen (images sorted by name: the order they completed in
        depends on the threads)."""
        by_image = lambda rows: tuple(sorted(rows, key=lambda r: r.image))  # noqa: E731
        events, figures = self.events.result()
        flips = self.events.flips_are_events
        return CheckSummary(
            self.compared, tuple(s.freeze() for s in self.stages.values() if s.verdicts), by_image(self.failed),
            {side: by_image(rows) for side, rows in self.rejected.items()}, events if flips else (),
            {k: self.first_divergent[k] for k in [*STAGES, "none"] if k in self.first_divergent},
            by_image(self.skipped), self.events.task, events, figures)
