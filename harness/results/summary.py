"""A check's (or a comparison's) results over every image: per stage, the flips, the images
not compared. Frozen from :class:`harness.compare.aggregate.RunSummary`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from harness.outcome import Outcome
from harness.results.hints import explain
from harness.stage import Stage
from harness.verdict import Verdict


@dataclass(frozen=True)
class MetricSummary:
    """One metric over the images: its worst value and its mean (over finite values)."""

    worst: float
    mean: float
    images: int

    def to_dict(self) -> dict:
        return {"worst": self.worst, "mean": self.mean, "images": self.images}


Metrics = Mapping[str, MetricSummary]


@dataclass(frozen=True)
class StageStats:
    """One stage over every compared image."""

    stage: Stage
    verdict: Verdict
    """The worst verdict of any image."""
    images: Mapping[str, int]
    """Verdict (its value) -> images."""
    metrics: Metrics
    isolated: Metrics | None = None
    """The deployed stage run alone on the reference's previous stage (None: not run)."""
    isolated_verdict: Verdict | None = None
    isolated_images: Mapping[str, int] | None = None
    histogram: tuple[int, ...] = ()
    """|error| counts over every element, in :data:`harness.compare.metrics.HISTOGRAM_EDGES` bins."""
    worst_images: tuple[str, ...] = ()
    """The images where this stage is worst, worst first."""

    def count(self, verdict: Verdict) -> int:
        return self.images.get(verdict.value, 0)

    def metric(self, key: str, which: str = "worst", isolated: bool = False) -> float | None:
        """``which`` (worst or mean) of metric ``key``, None where the stage has no such metric."""
        summary = ((self.isolated or {}) if isolated else self.metrics).get(key)
        return None if summary is None else getattr(summary, which)

    @property
    def why(self) -> str | None:
        """Where a diverged stage's error comes from (None unless diverged)."""
        return explain(self.stage, self.verdict, self.isolated_verdict)

    def to_dict(self) -> dict:
        return {
            "name": self.stage.value,
            "verdict": self.verdict.value,
            "images": dict(self.images),
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "isolated": {k: v.to_dict() for k, v in self.isolated.items()} if self.isolated else None,
            "isolated_verdict": self.isolated_verdict.value if self.isolated_verdict else None,
            "isolated_images": dict(self.isolated_images) if self.isolated_images else None,
            "histogram": list(self.histogram),
            "worst_images": list(self.worst_images),
            "why": self.why,
        }


@dataclass(frozen=True)
class ImageIssue:
    """An image that was not compared, and why."""

    image: str
    reason: str
    outcome: Outcome | None = None
    """Where recorded: failed (on both sides, or unreadable), rejected by deployment or by
    training (one side only)."""

    def to_dict(self) -> dict:
        out = {"image": self.image, "reason": self.reason}
        if self.outcome is not None:
            out["outcome"] = self.outcome
        return out


@dataclass(frozen=True)
class Flip:
    """An image whose top-1 class changed: a tie (within the tie margin) or a divergence."""

    image: str
    verdict: Verdict
    reference_top1: int
    deployed_top1: int
    margin: float
    """How far the reference's top-1 logit was ahead of its logit for the deployed top-1."""

    def to_dict(self) -> dict:
        return {"image": self.image, "verdict": self.verdict.value, "reference_top1": self.reference_top1,
                "deployed_top1": self.deployed_top1, "margin": self.margin}


@dataclass(frozen=True)
class CheckSummary:
    """Every image's outcome, summed: the stages compared, the flips, the images not compared."""

    compared: int
    stages: tuple[StageStats, ...]
    """The stages some image had, in pipeline order."""
    failed: tuple[ImageIssue, ...] = ()
    """Failed on both sides (or unreadable), by image name."""
    rejected: Mapping[str, tuple[ImageIssue, ...]] = field(default_factory=dict)
    """Side (deployment, training) -> the images only that side rejected."""
    flips: tuple[Flip, ...] = ()
    """Classification's events (its old name, kept for one release: :attr:`events`)."""
    first_divergent_per_image: Mapping[str, int] = field(default_factory=dict)
    """First divergent stage (or ``none``) -> images."""
    skipped: tuple[ImageIssue, ...] = ()
    """Entries of the image folder that are not inputs, and why (:mod:`harness.listing`)."""
    task: str = "classification"
    """The task compared (:mod:`harness.task`)."""
    events: tuple = ()
    """The task's per-image events (a top-1 change, a nearest-neighbour change), each a tie or
    a divergence, by image; each has ``image``, ``verdict`` and ``to_dict()``."""
    figures: Mapping = field(default_factory=dict)
    """The task's run-level figures (e.g. embeddings' neighbour overlap), JSON-able."""

    @property
    def images(self) -> int:
        """Every entry in: compared + failed + rejected + skipped."""
        return self.compared + len(self.failed) + sum(map(len, self.rejected.values())) + len(self.skipped)

    @property
    def ties(self) -> int:
        return sum(Verdict(e.verdict) is Verdict.TIE for e in self.events)

    @property
    def first_divergent_stage(self) -> Stage | None:
        """The earliest stage, in pipeline order, that diverged on any image."""
        return next((s.stage for s in self.stages if s.verdict is Verdict.DIVERGED), None)

    @property
    def verdict(self) -> Verdict | None:
        """The worst stage verdict (None: nothing compared)."""
        return Verdict.worst(s.verdict for s in self.stages) if self.stages else None

    def stage(self, stage: Stage) -> StageStats | None:
        return next((s for s in self.stages if s.stage == stage), None)

    def rejected_by(self, side: str) -> tuple[ImageIssue, ...]:
        return tuple(self.rejected.get(side, ()))

    def fails(self, fail_on: str = "diverged", allow_rejected: bool = False) -> bool:
        """Does the run fail: a stage's verdict at ``fail_on`` or worse, or (unless
        ``allow_rejected``) an image only one side rejected? (A run that compared nothing
        is an error, not a verdict: see :class:`harness.errors.NothingCompared`.)"""
        threshold = Verdict(fail_on).rank
        if any(s.verdict.rank >= threshold for s in self.stages):
            return True
        if any(Verdict(e.verdict).rank >= threshold for e in self.events):  # e.g. a neighbour change
            return True
        return any(self.rejected.values()) and not allow_rejected

    def to_dict(self) -> dict:
        return {
            "images": self.images,
            "compared": self.compared,
            "failed": [f.to_dict() for f in self.failed],
            "rejected": {side: [r.to_dict() for r in rows] for side, rows in self.rejected.items()},
            "skipped": [s.to_dict() for s in self.skipped],
            "task": self.task,
            "ties": self.ties,
            "events": [e.to_dict() for e in self.events],
            **({"task_figures": dict(self.figures)} if self.figures else {}),
            "flips": [f.to_dict() for f in self.flips],
            "first_divergent_stage": self.first_divergent_stage,
            "first_divergent_per_image": dict(self.first_divergent_per_image),
            "stages": [s.to_dict() for s in self.stages],
        }
