"""What the stage-by-stage writers read: a :class:`CheckReport` (``harness check``) or a
:class:`RunComparison` (``harness compare``), both :class:`StageReport`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from harness.formatting import fmt
from harness.names import markdown_code
from harness.names import markdown_code as code
from harness.names import markdown_text as text
from harness.results.interface import Case, Status, issue_cases
from harness.results.sides import DeployedInfo, ReferenceInfo, SpecInfo, Versions
from harness.results.summary import CheckSummary, StageStats
from harness.stage import DEFAULT_TOP_K
from harness.verdict import Verdict


@dataclass(frozen=True, kw_only=True)
class StageReport:
    """What the stage-by-stage writers (report.md, report.html, report.json) read: a
    :class:`CheckSummary` and what was compared. :class:`CheckReport` and
    :class:`RunComparison` say who played each side."""

    summary: CheckSummary
    spec: SpecInfo
    versions: Versions

    job: ClassVar[str] = "check"
    """The command (:mod:`harness.results.interface`)."""

    @property
    def title(self) -> str:
        raise NotImplementedError

    def sides(self) -> list[str]:
        """One Markdown line per side: what played the reference, what the deployed side."""
        raise NotImplementedError

    def reading(self) -> str | None:
        """The training definition read as a spec and how exactly it is replayed (the report's
        first line), when the reference is one (:attr:`ReferenceInfo.reading`)."""
        return None

    def caveat(self) -> str | None:
        """What makes the cost figures mean nothing, where something does (under them)."""
        return None

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
        from harness.scores import score_kind  # here: loads numpy only when called

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
        return markdown_code(self.spec.source)

    def to_dict(self) -> dict:
        raise NotImplementedError

    # -- the report interface (harness.results.interface) --

    @property
    def fail_on(self) -> str:
        return "diverged"

    @property
    def allow_rejected(self) -> bool:
        return False

    @property
    def case_class(self) -> str:
        """What the cases' classnames start with: ``JOB.DEPLOYED``."""
        return self.job

    @property
    def verdict(self) -> str:
        """The worst stage verdict (``equal``, ``close``, ``tie``, ``diverged``); ``stopped``
        when the run ended before every image, ``nothing compared`` when no image was."""
        if self.stopped_reason is not None:
            return "stopped"
        worst = self.summary.verdict
        return worst.value if worst is not None and self.summary.compared else "nothing compared"

    @property
    def passed(self) -> bool:
        """Exit status 0: complete, something compared (or a shard holding no image), and
        nothing ``fail_on`` forbids."""
        summary = self.summary
        if self.stopped_reason is not None:
            return False
        if not summary.images:
            return True
        return bool(summary.compared) and not self.fails(self.fail_on, self.allow_rejected)

    def cases(self) -> list[Case]:
        """Each stage with its verdict (failed at ``fail_on`` or worse), each task event (a top-1
        change: failed beyond what ``fail_on`` lets pass), each image not compared (one-sided
        rejections fail unless allowed; the others are skipped), and an error for a run that
        stopped or compared nothing."""
        summary, group = self.summary, self.case_class
        threshold = Verdict(self.fail_on).rank
        cases = [stage_case(s, group, threshold) for s in summary.stages]
        cases += [event_case(e, f"{group}.changes", threshold, self.tie_margin, self.scores_unit)
                  for e in summary.events]
        for side, rows in summary.rejected.items():
            cases += issue_cases(group, rows, f"rejected by {side}", self.allow_rejected)
        cases += issue_cases(group, summary.failed, "failed")
        cases += issue_cases(group, summary.skipped, "skipped")
        if self.stopped_reason is not None:
            cases.append(Case("run", group, Status.ERROR, f"the run stopped before every image: {self.stopped_reason}",
                              f"{summary.images} entries reported so far; resume the run to finish it"))
        elif summary.images and not summary.compared:
            cases.append(Case("images", group, Status.ERROR,
                              f"none of the {summary.images} images could be compared (every one failed or was "
                              "rejected): the run says nothing about the deployment"))
        return cases


VERDICT_ORDER = ("equal", "close", "tie", "diverged")


def stage_case(s: StageStats, group: str, threshold: int) -> Case:
    """A stage over every image: failed when its verdict is at the threshold rank or worse;
    the reason says how many images had each verdict, the worst error and where it comes from."""
    images = sum(s.images.values())
    tally = ", ".join(f"{s.images[v]} {v}" for v in VERDICT_ORDER if s.images.get(v))
    parts = [f"{s.verdict.value} ({tally} of {images} images)"]
    worst = s.metric("max_abs")
    if worst is not None:
        parts.append(f"max abs err {fmt(worst)}" + (f" (worst image {s.worst_images[0]})" if s.worst_images else ""))
    isolated = s.metric("max_abs", isolated=True)
    if isolated is not None:
        parts.append(f"isolated max abs err {fmt(isolated)}")
    if s.why:
        parts.append(s.why)
    details = [f"{key}: worst {fmt(m.worst)}, mean {fmt(m.mean)} over {m.images} images" for key, m in s.metrics.items()]
    if s.worst_images:
        details.append("worst images: " + ", ".join(s.worst_images))
    status = Status.FAILED if s.verdict.rank >= threshold else Status.PASSED
    return Case(s.stage.value, group, status, "; ".join(parts), "\n".join(details))


def event_case(event, group: str, threshold: int, margin: float, unit: str) -> Case:
    """An image's task event (a top-1 change, a nearest-neighbour change): failed when its
    verdict (``tie`` or ``diverged``) is at the threshold rank or worse."""
    verdict = Verdict(event.verdict)
    fields = {k: v for k, v in event.to_dict().items() if k not in ("image", "verdict")}
    said = ", ".join(f"{k} {fmt(v) if isinstance(v, float) else v}" for k, v in fields.items())
    within = "within" if verdict is Verdict.TIE else "beyond"
    reason = f"{verdict.value}: {said} ({within} the tie margin {fmt(margin)} {unit})"
    return Case(str(event.image), group, Status.FAILED if verdict.rank >= threshold else Status.PASSED, reason)


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
    reference_answers_alike: bool = False
    """The reference model answered every image this run checked alike (two or more, each output
    within the output tolerance of the first's): its answers do not depend on the image."""

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "incomplete": self.stopped_reason is not None,
                "stopped_reason": self.stopped_reason, "fail_on": self.fail_on, "isolated": self.isolated,
                "tie_margin": self.tie_margin, "scores_kind": self.scores_kind, "top_k": self.top_k,
                "allow_rejected": self.allow_rejected, "reference_answers_alike": self.reference_answers_alike}


@dataclass(frozen=True, kw_only=True)
class CheckReport(StageReport):
    """``harness check``: the deployed server against the training reference."""

    reference: ReferenceInfo
    deployed: DeployedInfo
    run: CheckRun
    classes: tuple[str, ...] = ()
    """The class names of the scores, in output order, where known (``--class-names``, or this
    repository's own classifier): a table showing a class shows its name beside its index."""

    @property
    def title(self) -> str:
        return f"Consistency report: {self.deployed.ensemble} vs the training reference"

    def sides(self) -> list[str]:
        d = self.deployed
        source = f"stages from {code(d.taps_model)}" if d.taps_model else "discovered from the server"
        return [f"Reference: {text(self.reference.recipe)}; model: {text(self.reference.model)}",
                f"Deployed: {code(d.ensemble)} at {text(d.server.url)} ({text(d.server.protocol)}), {source}"]

    def reading(self) -> str | None:
        return self.reference.reading

    def caveat(self) -> str | None:
        if not self.run.reference_answers_alike:
            return None
        return (f"The reference model ({self.reference.model}) answered every image alike (each output within the "
                "output tolerance of the first image's): its answers do not depend on the image (an untrained or "
                "broken model), so what a difference costs in its predictions (the agreement above, the changes "
                "counted) means nothing for it.")

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

    @property
    def fail_on(self) -> str:
        return self.run.fail_on

    @property
    def allow_rejected(self) -> bool:
        return self.run.allow_rejected

    @property
    def case_class(self) -> str:
        return f"check.{self.deployed.ensemble}"

    def to_dict(self) -> dict:
        verdict = self.summary.verdict
        return {**self.summary.to_dict(), "verdict": verdict.value if verdict else None,
                **({"classes": list(self.classes)} if self.classes else {}),
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
    compared_fail_on: str = "diverged"
    """``harness compare --fail-on``: the verdict (or worse) its cases fail at."""

    job: ClassVar[str] = "compare"

    @property
    def fail_on(self) -> str:
        return self.compared_fail_on

    @property
    def case_class(self) -> str:
        return f"compare.{self.side}"

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
