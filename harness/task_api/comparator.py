"""The comparison protocol of the task API: how two results are judged.

After Polygraphy's comparator: a comparator (compare function) takes two results and its own
tolerance type and returns a small typed result that is true unless it diverged; postprocessing
(a softmax, boxes from a map) happens before, apart. The array rule, top-k, neighbours, boxes and
a task's own comparators all speak it (harness/compare/comparators.py has the shipped ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from harness.result import StageResult
from harness.stage import Stage
from harness.tolerance import Tolerance
from harness.verdict import Verdict

__all__ = ["Comparator", "Comparison", "Fold"]


@dataclass(frozen=True)
class Comparison:
    """What a comparator found of one pair: its verdict and the metrics that say why (JSON-able
    numbers, per image, aggregated by the run: ``max_abs``, ``top1_agree``, ``cosine``, ...)."""

    verdict: Verdict
    metrics: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """True unless diverged (a tie is not a divergence)."""
        return self.verdict is not Verdict.DIVERGED


class Comparator:
    """Compares a reference's result with a deployment's under a tolerance of its own type
    (:attr:`tolerance_type`): ``comparator(reference, deployed, tolerance) -> Comparison``."""

    tolerance_type: ClassVar[type] = Tolerance

    def __call__(self, reference: Any, deployed: Any, tolerance: Any) -> Comparison:
        raise NotImplementedError

    def stage(self, stage: Stage, reference: Any, deployed: Any, isolated: Any, tolerance: Any) -> StageResult:
        """One stage of one image: the comparison of both sides, and of the isolated run's when given."""
        found = self(reference, deployed, tolerance)
        alone = self(reference, isolated, tolerance) if isolated is not None else None
        if alone is None:  # (not ``if alone``: a comparison is false when diverged)
            return StageResult(stage, found.verdict, dict(found.metrics), histogram=list(getattr(found, "histogram", [])))
        return StageResult(stage, found.verdict, dict(found.metrics), alone.verdict, dict(alone.metrics),
                           list(getattr(found, "histogram", [])))


class Fold:
    """A comparator over a stream, in bounded memory (a layer's activations, batch by batch):
    :meth:`add` each pair of batches, then :meth:`result` under a tolerance of :attr:`tolerance_type`."""

    __slots__ = ()
    tolerance_type: ClassVar[type] = Tolerance

    def add(self, reference: Any, deployed: Any, names: Sequence[str]) -> None:
        raise NotImplementedError

    def result(self, tolerance: Any) -> Comparison:
        raise NotImplementedError
