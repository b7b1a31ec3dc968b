"""What the search found: each :class:`Round`, each :class:`Cause` with its cost in
predictions, and the whole :class:`Diagnosis` (:mod:`~harness.diagnose.rounds` finds them,
:mod:`~harness.diagnose.conclusion` puts them in words)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.diagnose.catalogue import Hypothesis
from harness.diagnose.outcomes import Evaluation
from harness.stage import Stage


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
        """The first divergent stage left with every cause applied (None: nothing diverges)."""
        return self.final.first_divergent()
