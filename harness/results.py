"""The typed run model: what a run compared against what, and what it found, as frozen
dataclasses. The JSON, Markdown and HTML writers read these objects; report.json (and
accuracy.json, diagnosis.json) is derived from them by ``to_dict``, never the reverse.

- :class:`ReferenceInfo`, :class:`ServerInfo`, :class:`DeployedInfo`, :class:`SpecInfo`:
  the two sides and the spec, shared by every job.
- :class:`StageStats`, :class:`Flip`, :class:`ImageIssue`, :class:`CheckSummary`: a check's
  (or a comparison's) results over every image, frozen from
  :class:`harness.compare.aggregate.RunSummary`.
- :class:`CheckRun`, :class:`CheckReport`: ``harness check``; :class:`RunComparison`:
  ``harness compare``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from harness.compare.tolerance import Tolerance, Verdict
from harness.stage import DEFAULT_TOP_K, Stage

Versions = Mapping[str, "str | None"]
"""Package (and ``tritonserver``) -> version, None where not installed."""


@dataclass(frozen=True)
class ReferenceInfo:
    """The training side: the recipe (as described to people) and the reference model."""

    recipe: str
    model: str
    recipe_name: str | None = None
    """The recipe's short name (opencv, torchvision, dali, or a custom one's)."""

    def to_dict(self) -> dict:
        out = {"recipe": self.recipe, "model": self.model}
        if self.recipe_name is not None:
            out["recipe_name"] = self.recipe_name
        return out


@dataclass(frozen=True)
class ServerInfo:
    """The server a run talked to: ``url`` as reported (``embedded server (...)`` for the
    embedded one) and the protocol."""

    url: str
    protocol: str


@dataclass(frozen=True)
class DeployedInfo:
    """The deployed path a check read: the production ensemble and the taps model."""

    ensemble: str
    taps_model: str
    pipeline: str
    server: ServerInfo

    def to_dict(self) -> dict:
        return {"ensemble": self.ensemble, "taps_model": self.taps_model, "pipeline": self.pipeline,
                "url": self.server.url, "protocol": self.server.protocol}


@dataclass(frozen=True)
class SpecInfo:
    """The spec a run read, and the tolerances it judged with."""

    source: str
    tolerances: Mapping[str, Tolerance]
    deployed: Mapping | None = None
    """The deployed preprocessing as a TOML-like table (None where not known)."""
    reference: Mapping | None = None
    """The reference preprocessing, with its ``recipe``."""

    def to_dict(self) -> dict:
        out: dict = {"source": self.source}
        if self.deployed is not None:
            out["deployed"] = dict(self.deployed)
        if self.reference is not None:
            out["reference"] = dict(self.reference)
        out["tolerances"] = {str(k): dataclasses.asdict(v) for k, v in self.tolerances.items()}
        return out

    @staticmethod
    def of(spec, tolerances: Mapping[str, Tolerance]) -> "SpecInfo":
        """From a loaded :class:`harness.spec.Spec`."""
        from harness.spec import to_table

        return SpecInfo(spec.source, dict(tolerances), to_table(spec.preprocess),
                        {"recipe": spec.reference.recipe, **to_table(spec.reference.preprocess)})


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
        from harness.compare.hints import explain

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
    outcome: str | None = None
    """Where recorded: "failed" (on both sides, or unreadable), "rejected by deployment" or
    "rejected by training" (one side only)."""

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
    first_divergent_per_image: Mapping[str, int] = field(default_factory=dict)
    """First divergent stage (or ``none``) -> images."""

    @property
    def images(self) -> int:
        """Every image in: compared + failed + rejected."""
        return self.compared + len(self.failed) + sum(map(len, self.rejected.values()))

    @property
    def ties(self) -> int:
        return sum(f.verdict is Verdict.TIE for f in self.flips)

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
        return any(self.rejected.values()) and not allow_rejected

    def to_dict(self) -> dict:
        return {
            "images": self.images,
            "compared": self.compared,
            "failed": [f.to_dict() for f in self.failed],
            "rejected": {side: [r.to_dict() for r in rows] for side, rows in self.rejected.items()},
            "ties": self.ties,
            "flips": [f.to_dict() for f in self.flips],
            "first_divergent_stage": self.first_divergent_stage,
            "first_divergent_per_image": dict(self.first_divergent_per_image),
            "stages": [s.to_dict() for s in self.stages],
        }


@dataclass(frozen=True, kw_only=True)
class StageReport:
    """What the stage-by-stage writers (report.md, report.html, report.json) read: a
    :class:`CheckSummary` and what was compared. :class:`CheckReport` and
    :class:`RunComparison` say who played each side."""

    summary: CheckSummary
    spec: SpecInfo
    versions: Versions

    @property
    def title(self) -> str:
        raise NotImplementedError

    def sides(self) -> list[str]:
        """One Markdown line per side: what played the reference, what the deployed side."""
        raise NotImplementedError

    @property
    def tie_margin(self) -> float:
        raise NotImplementedError

    @property
    def top_k(self) -> int:
        return DEFAULT_TOP_K

    @property
    def stopped_reason(self) -> str | None:
        """Why the run ended before every image (None: it did not)."""
        return None

    def fails(self, fail_on: str = "diverged", allow_rejected: bool = False) -> bool:
        return self.summary.fails(fail_on, allow_rejected)

    def to_dict(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class CheckRun:
    """How ``harness check`` ran."""

    seconds: float
    tie_margin: float
    fail_on: str = "diverged"
    isolated: bool = True
    top_k: int = DEFAULT_TOP_K
    allow_rejected: bool = False
    stopped_reason: str | None = None

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "incomplete": self.stopped_reason is not None,
                "stopped_reason": self.stopped_reason, "fail_on": self.fail_on, "isolated": self.isolated,
                "tie_margin": self.tie_margin, "top_k": self.top_k, "allow_rejected": self.allow_rejected}


@dataclass(frozen=True, kw_only=True)
class CheckReport(StageReport):
    """``harness check``: the deployed server against the training reference."""

    reference: ReferenceInfo
    deployed: DeployedInfo
    run: CheckRun

    @property
    def title(self) -> str:
        return f"Consistency report: {self.deployed.ensemble} vs the training reference"

    def sides(self) -> list[str]:
        d = self.deployed
        return [f"Reference: {self.reference.recipe}; model: {self.reference.model}",
                f"Deployed: `{d.ensemble}` at {d.server.url} ({d.server.protocol}), stages from `{d.taps_model}`"]

    @property
    def tie_margin(self) -> float:
        return self.run.tie_margin

    @property
    def top_k(self) -> int:
        return self.run.top_k

    @property
    def stopped_reason(self) -> str | None:
        return self.run.stopped_reason

    def to_dict(self) -> dict:
        verdict = self.summary.verdict
        return {**self.summary.to_dict(), "verdict": verdict.value if verdict else None,
                "reference": self.reference.to_dict(), "deployed": self.deployed.to_dict(),
                "spec": self.spec.to_dict(), "versions": dict(self.versions), "run": self.run.to_dict()}


@dataclass(frozen=True, kw_only=True)
class RunComparison(StageReport):
    """``harness compare``: the tensors two ``check --save-tensors`` runs saved, run A playing
    the reference and run B the deployed side, both taken from ``side``."""

    run_a: str
    run_b: str
    side: str
    """``deployed`` or ``reference``: which side of each run is compared."""
    model: str
    """Run A's reference model."""
    deployed_b: Mapping
    """Run B's ``deployed`` block, as its report.json recorded it."""
    run_tie_margin: float

    @property
    def title(self) -> str:
        return f"Run comparison: {self.run_b} against {self.run_a} ({self.side} side)"

    def sides(self) -> list[str]:
        b = self.deployed_b
        served = f"; served by `{b['ensemble']}` at {b['url']} ({b['protocol']})" if b.get("ensemble") else ""
        return [f"Run A (plays the reference): `{self.run_a}`, {self.side} side; reference model: {self.model}",
                f"Run B (compared with it): `{self.run_b}`, {self.side} side" + served]

    @property
    def tie_margin(self) -> float:
        return self.run_tie_margin

    def to_dict(self) -> dict:
        verdict = self.summary.verdict
        b = self.deployed_b
        return {
            **self.summary.to_dict(), "title": self.title, "verdict": verdict.value if verdict else None,
            # The two runs in the shape a check's report has (kept for readers of earlier reports).
            "reference": {"recipe": f"run A ({self.run_a}), {self.side} side", "model": self.model},
            "deployed": {"ensemble": f"run B ({self.run_b}), {self.side} side", "taps_model": b.get("taps_model"),
                         "pipeline": b.get("pipeline"), "url": b.get("url"), "protocol": b.get("protocol")},
            "runs": {"a": self.run_a, "b": self.run_b, "side": self.side},
            "spec": self.spec.to_dict(), "versions": dict(self.versions),
            "run": {"compared_runs": [self.run_a, self.run_b], "side": self.side, "incomplete": False,
                    "tie_margin": self.run_tie_margin},
        }
