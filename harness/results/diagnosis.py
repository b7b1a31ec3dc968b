"""``harness diagnose``'s report type: :class:`DiagnosisReport`, the
:class:`~harness.diagnose.Diagnosis` and what it ran on; diagnosis.json is its ``to_dict``.
The writer (diagnosis.md, the files) is :mod:`harness.report.diagnosis`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from harness.formatting import fmt
from harness.outcome import Outcome
from harness.results.interface import Case, Status, issue_cases
from harness.results.sides import ReferenceInfo, ServerInfo, Versions
from harness.results.summary import ImageIssue
from harness.stage import Stage

# The job's own types, which this module reads by their attributes only: named here, not
# imported, so that the run model imports no job (tests/test_imports.py counts every import).
Cause = Diagnosis = Evaluation = Round = TrainingFingerprint = Any
"""harness.diagnose's."""


@dataclass(frozen=True)
class CombinedChange:
    """Every cause applied to the spec's ``[reference]``: what training should say it does."""

    reference: Mapping
    """The corrected ``[reference]`` table."""
    toml: str
    note: str | None = None
    """What a spec cannot say (the model in fp16)."""
    unchanged: bool = False
    """The table holds nothing but the spec's own recipe: every cause is one a spec cannot say
    (:attr:`note`), so there is no change in spec terms to show or write."""


@dataclass(frozen=True)
class DiagnosisReport:
    """One ``harness diagnose`` run: the :class:`~harness.diagnose.Diagnosis` and what it ran on."""

    diagnosis: "Diagnosis"
    images: int
    failed: tuple[ImageIssue, ...]
    """Images left out of the search, each with its outcome."""
    screen_images: int
    reference: ReferenceInfo
    ensemble: str
    server: ServerInfo
    combined_change: CombinedChange
    spec: str
    written_spec: str | None
    tie_margin: float
    timing_seconds: Mapping[str, float] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    versions: Versions = field(default_factory=dict)
    fingerprint: str | None = None
    """The preprocessing the deployment behaves as, in words (every cause applied to the reference)."""
    found: tuple[str, ...] = ()
    """How a deployment discovered on the server was read (empty for this repository's pipelines)."""
    scores_kind: str = "logits"
    """What the deployed output holds: the output errors and the tie margin are in its units."""
    not_written: str | None = None
    """Why ``--write-spec`` wrote nothing (None: it wrote, or was not asked)."""
    training: "TrainingFingerprint | None" = None
    """A training callable's fingerprint: the spec the deployment was diagnosed against."""
    compared: "Evaluation | None" = None
    """The training callable itself against the deployment (no parameter of it varied)."""
    allow_rejected: bool = False
    """``--allow-rejected``: an image only one side processes does not fail the run."""
    skipped: tuple[ImageIssue, ...] = ()
    """Folder entries that are not images (hidden, a sub-folder, a link leading out...), with why:
    listed as check lists them (:func:`harness.listing.list_inputs`)."""
    written_training_spec: str | None = None
    """``--write-training-spec``: where the training definition was written as it is (a callable's
    fingerprint, a framework's reading); None: not asked, or nothing written (:attr:`training_not_written`)."""
    training_not_written: str | None = None

    job: ClassVar[str] = "diagnose"

    def one_sided(self) -> tuple[ImageIssue, ...]:
        """The images only one side could process."""
        return tuple(f for f in self.failed if f.outcome is not None and Outcome(f.outcome).one_sided)

    # -- the report interface (harness.results.interface) --

    @property
    def title(self) -> str:
        return f"Diagnosis: {self.ensemble} vs the training reference ({self.reference.recipe})"

    def callable_unexplained(self) -> bool:
        """A training callable no spec reproduces, which itself diverges from the deployment."""
        return self.training is not None and not self.training.reproduced and (
            self.compared is not None and self.compared.first_divergent() is not None)

    @property
    def verdict(self) -> str:
        """``nothing diverged``, ``explained`` (check's divergence, every bit of it explained by
        the causes found), ``unexplained`` (a divergence remains) or ``rejected`` (an image one
        side only processes)."""
        d = self.diagnosis
        if d.remaining is not None or self.callable_unexplained():
            return "unexplained"
        if self.one_sided() and not self.allow_rejected:
            return "rejected"
        return "nothing diverged" if d.first_divergent is None else "explained"

    def check_fails(self) -> bool:
        """Check's verdict on the same images fails (what ``harness check`` exits 1 on); without
        it (a diagnosis built by hand), a divergence or a one-sided image does."""
        d = self.diagnosis
        if d.check is not None:
            return d.check.fails(self.allow_rejected)
        return d.first_divergent is not None or self.callable_unexplained() or bool(
            self.one_sided() and not self.allow_rejected)

    @property
    def passed(self) -> bool:
        """Exit status 0 (:meth:`harness.diagnose.job.DiagnoseResult.exit_status`): check's rule,
        on check's verdict of the same images; an explained divergence still fails."""
        return not self.check_fails()

    def cases(self) -> list[Case]:
        """Whether the divergence is explained (failed when one remains), every hypothesis of
        every round (the one kept and those evaluated or rejected: passed, each with how it
        did; those not pursued or not applicable: skipped, with why), a training callable
        that diverges with no spec reproducing it, and each image left out (rejected by one
        side only: failed unless allowed)."""
        d = self.diagnosis
        causes = " + ".join(c.hypothesis.name for c in d.causes)
        details = "\n".join(x for x in (d.conclusion, d.recommendation) if x)
        cases = []
        if d.check is not None:  # what the exit status says: check's verdict on the same images
            cases.append(Case("check's verdict", "diagnose", Status.FAILED if d.check.first_divergent else Status.PASSED,
                              d.check.describe()))
        if d.remaining is not None:
            conclusion = Case("divergence explained", "diagnose", Status.FAILED,
                              f"a divergence remains at `{d.remaining}` that no known culprit explains"
                              + (f" (found: {causes})" if causes else ""), details)
        elif d.first_divergent is None:
            conclusion = Case("divergence explained", "diagnose", Status.PASSED, "nothing diverged", details)
        else:
            conclusion = Case("divergence explained", "diagnose", Status.PASSED, f"explained by {causes}", details)
        cases.append(conclusion)
        if self.training is not None:
            unexplained = self.callable_unexplained()
            t = self.training
            cases.append(Case(t.name, "diagnose.training", Status.FAILED if unexplained else Status.PASSED,
                              f"no spec reproduces the training callable and it diverges from the deployment at "
                              f"`{self.compared.first_divergent()}`" if unexplained else
                              f"reproduced by a spec, {t.exactness()}" if t.reproduced else
                              f"not reproduced by any spec ({t.exactness()}), and it does not diverge from the deployment"))
        for r in d.rounds:
            cases += [hypothesis_case(r, e) for e in r.ranked]
        cases += issue_cases("diagnose", self.failed, allow_rejected=self.allow_rejected)
        cases += issue_cases("diagnose", self.skipped, "skipped")
        return cases

    def to_dict(self) -> dict:
        """diagnosis.json."""
        d = self.diagnosis
        return {
            "first_divergent_stage": d.first_divergent,
            "conclusion": d.conclusion,
            "recommendation": d.recommendation,
            "explained_by": " + ".join(c.hypothesis.name for c in d.explained_by) or None,
            "causes": [cause_dict(c) for c in d.causes],
            "remaining_divergence": d.remaining,
            "stopped": d.stopped,
            "baseline": evaluation_summary(d.baseline),
            "final": evaluation_summary(d.final),
            "rounds": [round_dict(r) for r in d.rounds],
            "hypotheses": [HypothesisRow.of(e, d.rounds[0].base, d.first_divergent).to_dict() for e in d.ranked],
            "images": self.images,
            "failed": [f.to_dict() for f in self.failed],
            "skipped": [{"image": s.image, "reason": s.reason} for s in self.skipped],
            "screen_images": self.screen_images,
            "reference": self.reference.to_dict(),
            "deployed": {"ensemble": self.ensemble, "url": self.server.url, "protocol": self.server.protocol,
                         **({"found": list(self.found)} if self.found else {})},
            "fingerprint": self.fingerprint,
            "scores_kind": self.scores_kind,
            "write_spec_not_written": self.not_written,
            "training_fingerprint": self.training.to_dict() if self.training else None,
            "training_callable_vs_deployment": evaluation_summary(self.compared) if self.compared else None,
            "combined_change": dataclasses.asdict(self.combined_change),
            "spec": self.spec, "written_spec": self.written_spec, "written_training_spec": self.written_training_spec,
            "write_training_spec_not_written": self.training_not_written, "tie_margin": self.tie_margin,
            "timing_seconds": dict(self.timing_seconds), "counts": dict(self.counts), "versions": dict(self.versions),
            "verdict": self.verdict, "passed": self.passed,
            "check": d.check.to_dict() if d.check else None,
            "check_with_every_cause": d.after.to_dict() if d.after else None,
        }


@dataclass(frozen=True)
class HypothesisRow:
    """One hypothesis of a round, against that round's base on the same images."""

    hypothesis: str
    culprit: str
    status: str
    changes: tuple[tuple, ...]
    """(key, reference value, hypothesized value)."""
    recipe: str | None
    images: int
    stage: Stage
    diverged_before: int
    diverged_after: int
    error_before: float | None
    error_after: float | None
    output_error_before: float | None
    output_error_after: float | None
    top1_agreement_before: float | None
    top1_agreement_after: float | None
    first_divergent_after: Stage | None

    @staticmethod
    def of(e: "Evaluation", base: "Evaluation", focus: Stage | None) -> "HypothesisRow":
        stage = focus or Stage.OUTPUT
        base = e.baseline or base
        return HypothesisRow(
            e.name, e.culprit, e.status, tuple(e.changes), e.hypothesis.recipe if e.hypothesis else None, e.images,
            stage, base.diverged(stage), e.diverged(stage), base.error(stage), e.error(stage),
            base.error(Stage.OUTPUT), e.error(Stage.OUTPUT), base.top1_agreement(), e.top1_agreement(),
            e.first_divergent())

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["changes"] = [{"key": k, "reference": a, "hypothesis": b} for k, a, b in self.changes]
        return out


def hypothesis_case(r: "Round", e: "Evaluation") -> Case:
    """One hypothesis of round ``r``: passed when decided (kept, evaluated, rejected),
    skipped when not pursued or not applicable; the reason says how it did."""
    h = HypothesisRow.of(e, r.base, r.focus)
    stage = f"`{r.focus}`"
    figures = (f"diverged up to {stage} {h.diverged_before} -> {h.diverged_after if h.images else '-'}, error at "
               f"{stage} {fmt(h.error_before)} -> {fmt(h.error_after)}, output error {fmt(h.output_error_before)} -> "
               f"{fmt(h.output_error_after)}")
    if r.chosen is not None and e is r.chosen:
        status, reason = Status.PASSED, f"{'explains' if r.explains else 'explains part of'} {stage}, kept: {figures}"
    elif h.status.startswith(("not pursued", "not applicable")):
        status, reason = Status.SKIPPED, h.status
    elif h.status.startswith("evaluated"):
        status, reason = Status.PASSED, f"evaluated, not kept: {figures}"
    else:
        status, reason = Status.PASSED, f"{h.status}: {figures}"
    changes = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in h.changes)
    return Case(h.hypothesis, f"diagnose.round{r.number}", status, reason,
                f"culprit: {h.culprit}" + (f"\nchanges: {changes}" if changes else ""))


def evaluation_summary(e) -> dict:
    return {
        "images": e.images,
        "first_divergent_stage": e.first_divergent(),
        "verdicts": {s: dict(c) for s, c in e.verdicts.items() if c},
        "errors": {s: e.error(s) for s in e.verdicts if e.errors(s)},
        "top1_agreement": e.top1_agreement(),
        "top1_flips": e.flips(),
        "top1_ties": e.ties(),
    }


def applied_before(r: "Round") -> list[str]:
    return [h.name for h in r.base.on_top_of] + ([r.base.hypothesis.name] if r.base.hypothesis else [])


def round_dict(r: "Round") -> dict:
    return {
        "round": r.number,
        "first_divergent_stage": r.focus,
        "applied_before": applied_before(r),
        "base": evaluation_summary(r.base),
        "chosen": r.chosen.name if r.chosen else None,
        "explains": r.explains,
        "hypotheses": [HypothesisRow.of(e, r.base, r.focus).to_dict() for e in r.ranked],
    }


def cause_dict(c: "Cause") -> dict:
    return {
        "cause": c.hypothesis.name,
        "culprit": c.hypothesis.culprit,
        "round": c.round,
        "changes": [{"key": k, "reference": a, "deployment_behaves_as": b} for k, a, b in c.changes],
        "recipe": c.hypothesis.recipe,
        "fp16": c.hypothesis.fp16,
        "cost": {"top1_flips": c.flips, "output_error": c.output_error},
        "without_it": evaluation_summary(c.without),
        "advice": c.advice,
    }
