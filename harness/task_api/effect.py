"""What ``harness accuracy`` hands a task to score (:class:`Observed`), and what it gets back.

The job reads every path (the reference and each deployed one) in the one way the task asks
(:attr:`harness.task_api.Task.effect_from`), leaves out every image some path failed, and asks
the task's :meth:`~harness.task_api.Task.effect_on` for its effect: an object with

- ``to_dict(names)``: the ``effect`` section of accuracy.json (``names``: the evaluated images);
- ``markdown(names)``: its lines of accuracy.md;
- ``any_changes(ties)``: whether a deployed path changes the task's result on some image
  (beyond the tie margin unless ``ties``);
- ``cases(models, ties_fail, name)``: each deployed path's :class:`~harness.results.interface.Case`
  (``models``: the model serving each deployed path; ``name``: the case's default name);

and, when the effect itself decides which images it scored, ``evaluated`` (their names) and
``unlabeled`` (image -> why its label cannot be used: its failed row).

No job names a task: a task registered anywhere is scored by the same code (tests/test_one_judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.stage import DEFAULT_TOP_K


@dataclass(frozen=True)
class Observed:
    """Every path's reading of a labeled set, as :meth:`~harness.task_api.Task.effect_on` scores it."""

    dataset: Any
    """The labeled set (:class:`harness.accuracy.Dataset`: ``samples``, ``labeled``, ``label_name``)."""
    evaluated: tuple
    """The samples no path failed, in the dataset's order."""
    paths: tuple[str, ...]
    """The reference (``reference``) first, then each deployed path's label."""
    margin: float
    """The tie margin, in the units the task's events are judged in."""
    classes: Sequence[str] = ()
    """The model's class names (a task labeled by ``classes``), else the set's own label names."""
    k: int = DEFAULT_TOP_K
    """Classes kept per image (``--top-k``)."""
    predictions: Sequence[Any] = ()
    """``effect_from = "top-k"`` or ``"outputs"``: each path's :class:`harness.accuracy.Predictions`
    (top-k classes of every image it processed, with ``outputs`` its raw outputs too, its failures),
    the reference first."""
    results: Mapping[str, Mapping[str, dict]] = field(default_factory=dict)
    """``effect_from = "results"``: path -> image -> stages (the result stage derived as check
    derives it), the reference first."""
    changes: Sequence[Mapping[str, str]] = ()
    """``effect_from = "results"``: each deployed path's changed images (image -> ``tie`` or
    ``diverged``), as the task's comparator judged them."""

    def labels(self) -> list[str | None]:
        """The evaluated images' label names, in order."""
        return [self.dataset.label_name(s) for s in self.evaluated]

    def outputs(self):
        """Path -> the raw outputs of the evaluated images stacked ([images, ...])."""
        import numpy as np

        return {p.path: np.stack([p.logits[s.name] for s in self.evaluated]) for p in self.predictions}
