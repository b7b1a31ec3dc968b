"""What the stage-by-stage writers read: a :class:`CheckReport` (``harness check``) or a
:class:`RunComparison` (``harness compare``), both :class:`StageReport`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from harness.names import markdown_code as code
from harness.names import markdown_text as text
from harness.results.sides import DeployedInfo, ReferenceInfo, SpecInfo, Versions
from harness.results.summary import CheckSummary
from harness.stage import DEFAULT_TOP_K


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
    def scores_kind(self) -> str:
        """What the compared outputs hold: ``logits`` or ``probabilities`` (:mod:`harness.scores`)."""
        return "logits"

    @property
    def scores_unit(self) -> str:
        """The unit of the tie margin and of the output's errors (``logits``, ``probability``)."""
        from harness.scores import score_kind

        return score_kind(self.scores_kind).unit

    @property
    def top_k(self) -> int:
        return DEFAULT_TOP_K

    @property
    def stopped_reason(self) -> str | None:
        """Why the run ended before every image (None: it did not)."""
        return None

    def fails(self, fail_on: str = "diverged", allow_rejected: bool = False) -> bool:
        return self.summary.fails(fail_on, allow_rejected)

    def found(self) -> tuple[str, ...]:
        """Lines on how the deployed side was found on the server, if it was discovered."""
        return ()

    def spec_line(self) -> str:
        """The spec read, as the report's ``Spec:`` line says it."""
        from harness.names import markdown_code

        return markdown_code(self.spec.source)

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
    scores_kind: str = "logits"
    """What the output compared holds; the tie margin is in its units."""

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "incomplete": self.stopped_reason is not None,
                "stopped_reason": self.stopped_reason, "fail_on": self.fail_on, "isolated": self.isolated,
                "tie_margin": self.tie_margin, "scores_kind": self.scores_kind, "top_k": self.top_k,
                "allow_rejected": self.allow_rejected}


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
        source = f"stages from {code(d.taps_model)}" if d.taps_model else "discovered from the server"
        return [f"Reference: {text(self.reference.recipe)}; model: {text(self.reference.model)}",
                f"Deployed: {code(d.ensemble)} at {text(d.server.url)} ({text(d.server.protocol)}), {source}"]

    def found(self) -> tuple[str, ...]:
        """What discovery found on the server (empty for this repository's own pipelines)."""
        return self.deployed.found if self.deployed.taps_model is None else ()

    def spec_line(self) -> str:
        return self.reference.spec_line(self.spec.source)

    @property
    def tie_margin(self) -> float:
        return self.run.tie_margin

    @property
    def scores_kind(self) -> str:
        return self.run.scores_kind

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
        served = (f"; served by {code(b['ensemble'])} at {text(b['url'])} ({text(b['protocol'])})"
                  if b.get("ensemble") else "")
        return [f"Run A (plays the reference): {code(self.run_a)}, {self.side} side; reference model: {text(self.model)}",
                f"Run B (compared with it): {code(self.run_b)}, {self.side} side" + served]

    @property
    def tie_margin(self) -> float:
        return self.run_tie_margin

    @property
    def scores_kind(self) -> str:
        return (self.deployed_b.get("deployment") or {}).get("scores_kind", "logits")

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
