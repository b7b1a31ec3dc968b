"""What the search found: each :class:`Round`, each :class:`Cause` with its cost in
predictions, and the whole :class:`Diagnosis` (:mod:`~harness.diagnose.rounds` finds them,
:mod:`~harness.diagnose.conclusion` puts them in words)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.diagnose.catalogue import Hypothesis
from harness.diagnose.outcomes import Evaluation
from harness.results import CheckSummary
from harness.stage import Stage
from harness.verdict import Verdict


@dataclass(frozen=True)
class CheckVerdict:
    """``harness check``'s verdict on the diagnosed images, computed by check's own code (its
    per-image comparison folded as check folds it): where the diagnosis starts from, and,
    against the reference with every cause applied, what it ends with."""

    summary: CheckSummary
    first_divergent: Stage | None
    """Check's first diverged stage; the task's result stage where only an event diverged (an
    embedding's neighbour change, decided over the run); None: nothing diverged."""

    @staticmethod
    def of(summary: CheckSummary, result_stage: Stage) -> "CheckVerdict":
        stage = summary.first_divergent_stage
        if stage is None and any(Verdict(e.verdict) is Verdict.DIVERGED for e in summary.events):
            stage = result_stage
        return CheckVerdict(summary, stage)

    @property
    def diverged_images(self) -> int:
        """Images with a diverged stage (or event)."""
        per_image = self.summary.first_divergent_per_image
        stages = self.summary.compared - per_image.get("none", 0)
        return stages or sum(Verdict(e.verdict) is Verdict.DIVERGED for e in self.summary.events)

    def fails(self, allow_rejected: bool) -> bool:
        """Check's exit status 1 (``--fail-on diverged``): :meth:`CheckSummary.fails`."""
        return self.summary.fails("diverged", allow_rejected)

    def describe(self) -> str:
        """``diverged first at `resize` on 3 of 3 images compared`` or ``nothing diverged on the 3 images compared``."""
        compared = self.summary.compared
        if self.first_divergent is None:
            return f"nothing diverged on the {compared} images compared"
        return f"diverged first at `{self.first_divergent}` on {self.diverged_images} of {compared} images compared"

    def to_dict(self) -> dict:
        s = self.summary
        return {"diverged": self.first_divergent is not None, "first_divergent_stage": self.first_divergent,
                "diverged_images": self.diverged_images, "compared": s.compared,
                "first_divergent_per_image": dict(s.first_divergent_per_image),
                "stages": {st.stage: st.verdict.value for st in s.stages}, "ties": s.ties,
                "rejected": {side: len(rows) for side, rows in s.rejected.items()}, "failed": len(s.failed)}


@dataclass(frozen=True)
class Round:
    """One round: where the divergence first appears under the changes found before it,
    every hypothesis tried on top of them (ranked), and the one kept."""

    number: int
    base: Evaluation
    """The reference with the earlier rounds' changes, on every image."""
    focus: Stage
    ranked: tuple[Evaluation, ...]
    chosen: Evaluation | None
    explains: bool
    """``chosen`` brings every stage up to ``focus`` to equal or close on every image."""


@dataclass(frozen=True)
class Cause:
    """One change found, with what it costs in predictions."""

    hypothesis: Hypothesis
    round: int
    changes: tuple
    """(key, reference value, value the deployment behaves as) of each spec key."""
    flips: int | None
    """Top-1 flips that come back when this change alone is undone (None: not measurable)."""
    output_error: float | None
    """Mean output RMSE added when this change alone is undone."""
    without: Evaluation
    advice: str


@dataclass(frozen=True)
class Diagnosis:
    baseline: Evaluation
    first_divergent: Stage | None
    """The first divergent stage of the reference as specified."""
    rounds: tuple[Round, ...]
    causes: tuple[Cause, ...]
    """Every change kept, most costly first."""
    final: Evaluation
    """The reference with every cause applied."""
    stopped: str
    """Why the rounds ended: ``nothing diverges``, ``nothing in the catalogue helps``, ``round bound``."""
    conclusion: str
    recommendation: str | None
    check: CheckVerdict | None = None
    """Check's verdict on the same images, where the diagnosis started from (None: the deployed
    side was a training callable's outputs)."""
    after: CheckVerdict | None = None
    """Check's comparison against the reference with every cause applied (the corrected spec):
    None where no cause was found, or where a spec cannot say one (the model in fp16)."""

    @property
    def ranked(self) -> tuple[Evaluation, ...]:
        """The first round's hypotheses, ranked (empty when nothing diverged)."""
        return self.rounds[0].ranked if self.rounds else ()

    @property
    def explained_by(self) -> tuple[Cause, ...]:
        """The causes, when together they explain every divergence; else empty."""
        return self.causes if self.remaining is None and self.causes else ()

    @property
    def remaining(self) -> Stage | None:
        """The first divergent stage left with every cause applied (None: nothing diverges): by
        check's comparison where it ran (:attr:`after`), else nothing found leaves check's
        divergence, else the replay's."""
        if self.check is not None and self.check.first_divergent is None:
            return None
        if self.after is not None:
            return self.after.first_divergent
        if self.check is not None and not self.causes:
            return self.check.first_divergent
        return self.final.first_divergent()
