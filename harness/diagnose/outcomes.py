"""What a setting of the reference does on each image (:class:`ImageOutcome`) and on a set of
images (:class:`Evaluation`): the verdicts and errors the search ranks hypotheses by."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from harness.diagnose.catalogue import Hypothesis
from harness.stage import STAGES, Stage
from harness.task import Task, get_task
from harness.verdict import Verdict

MIN_ERROR_DROP = 0.3
"""A hypothesis improves a stage only if it cuts the stage's error (mean RMSE over images) by
at least this share, or moves :data:`MIN_IMAGES_LEFT` of the diverged images out of
``diverged`` while cutting the error by :data:`MIN_IMAGES_ERROR_DROP` at least.

Measured (``benchmarks/diagnose_thresholds.py``, 33 corpus photos; docs/own-deployments.md):
culprits that are no cause cut the error by at most 21.5% (interpolation area against a
deployment that blurs), 7.5% (fast IDCT against a gamma curve), 2% (against a 4-level
brightness shift), and move images out only with no cut at all (a diverged flip turned into a
tie by noise on the logits); real causes that explain only part of a stage, beside another
at the same stage, cut it by 48-74%, or by 4.3% while moving half its diverged images out (the
output-size rounding beside the crop-offset rounding of a training script)."""
MIN_IMAGES_LEFT = 0.1
"""The share of the images diverged up to the stage (at least one) that a hypothesis moving
images out of ``diverged`` must move (see :data:`MIN_ERROR_DROP`)."""
MIN_IMAGES_ERROR_DROP = 0.02
"""The error cut a hypothesis moving images out must also make: noise turns a flip into a tie
without changing any error."""


@dataclass(frozen=True)
class Improvement:
    """What a hypothesis does to a stage against the base it was tried on."""

    error_drop: float
    """Relative drop of the stage's error (1.0: gone; negative: worse)."""
    images_left: int
    """Images no longer diverged up to the stage."""
    diverged_before: int

    @property
    def real(self) -> bool:
        """Beyond noise: the error cut by :data:`MIN_ERROR_DROP`, or :data:`MIN_IMAGES_LEFT` of
        the diverged images out of ``diverged`` with the error cut by :data:`MIN_IMAGES_ERROR_DROP`."""
        enough_images = self.images_left >= max(1.0, MIN_IMAGES_LEFT * self.diverged_before)
        return self.error_drop >= MIN_ERROR_DROP or (enough_images and self.error_drop >= MIN_IMAGES_ERROR_DROP)

    def describe(self) -> str:
        return (f"error {-self.error_drop:+.1%}, {self.images_left} of {self.diverged_before} diverged images "
                "no longer diverged")


@dataclass(frozen=True)
class ImageOutcome:
    """One image under one setting: each stage's verdict and error (RMSE; ``topk``: 1.0 when
    the top-1 class changed, else 0.0), or why the reference failed on it."""

    verdicts: Mapping[str, str]
    errors: Mapping[str, float]
    failed: str | None = None

    @property
    def first_divergent_index(self) -> int:
        """Index in STAGES of the first diverged stage (len(STAGES) if none)."""
        return next((i for i, s in enumerate(STAGES) if self.verdicts.get(s) == Verdict.DIVERGED), len(STAGES))


@dataclass(frozen=True)
class Evaluation:
    """One setting replayed on some images: a hypothesis tried on top of the changes found
    so far (``on_top_of``), or a setting evaluated for itself (``hypothesis`` None)."""

    name: str
    culprit: str
    outcomes: Mapping[int, ImageOutcome] = field(default_factory=dict)
    hypothesis: Hypothesis | None = None
    on_top_of: tuple[Hypothesis, ...] = ()
    status: str = "evaluated"
    """``evaluated`` (every image), ``screened`` (the first few, better there), ``rejected: ...``
    (no better there), ``not pursued: ...`` (another hypothesis explains the stage), or
    ``not applicable: ...``."""
    changes: tuple = ()
    """(key, reference value, hypothesized value) of the hypothesis, against the original reference."""
    baseline: "Evaluation | None" = None
    """What it was compared with, on the same images (the first few, for a rejected hypothesis)."""
    task_name: str = "classification"
    """The task judged after the model input (:mod:`harness.task`): its result stage and words.
    Named, not guessed from the stages the outcomes hold."""

    @property
    def evaluated(self) -> bool:
        return self.status.startswith("evaluated")

    @property
    def images(self) -> int:
        return len(self.outcomes)

    @property
    def verdicts(self) -> dict[str, Counter]:
        counts = {s: Counter() for s in STAGES}
        for o in self.outcomes.values():
            for stage, v in o.verdicts.items():
                counts[stage][v] += 1
        return counts

    def errors(self, stage: Stage) -> list[float]:
        return [o.errors[stage] for o in self.outcomes.values() if stage in o.errors]

    def diverged(self, upto: Stage) -> int:
        """Images with a diverged stage at or before ``upto``."""
        last = STAGES.index(upto)
        return sum(o.first_divergent_index <= last for o in self.outcomes.values())

    def error(self, stage: Stage) -> float | None:
        """Mean over images of the stage's RMSE (shape mismatches count as infinite)."""
        values = self.errors(stage)
        return float(np.mean(values)) if values else None

    def first_divergent(self) -> Stage | None:
        first = min((o.first_divergent_index for o in self.outcomes.values()), default=len(STAGES))
        return STAGES[first] if first < len(STAGES) else None

    @property
    def task(self) -> Task:
        """The task whose result these outcomes hold, for its result stage and its words."""
        return get_task(self.task_name)

    @property
    def result_stage(self) -> Stage:
        """The task's result stage (``topk`` for classification)."""
        return self.task.result_stage

    def flips(self) -> int | None:
        """Images with the task's event (a top-1 class differing from the deployment's; a
        nearest-neighbour change), near ties included."""
        values = self.errors(self.result_stage)
        return int(sum(values)) if values else None

    def ties(self) -> int:
        """Events within the tie margin: counted in :meth:`flips`, never divergences."""
        return sum(o.verdicts.get(self.result_stage) == Verdict.TIE for o in self.outcomes.values())

    def top1_agreement(self) -> float | None:
        """The share of images without the task's event (classification: top-1 agreement)."""
        values = self.errors(self.result_stage)
        return 1.0 - float(np.mean(values)) if values else None

    def improvement(self, base: "Evaluation", stage: Stage) -> Improvement:
        """What this evaluation does to ``stage`` against ``base`` (the same images)."""
        before, after = base.error(stage), self.error(stage)
        if before is None or after is None or not math.isfinite(after):
            drop = 0.0 if after is None or not math.isfinite(after) else 1.0
        elif not math.isfinite(before):
            drop = 1.0
        else:
            drop = (before - after) / before if before else 0.0
        return Improvement(drop, base.diverged(stage) - self.diverged(stage), base.diverged(stage))

    def improves(self, base: "Evaluation", stage: Stage) -> bool:
        """A real improvement of ``stage`` (:attr:`Improvement.real`), never a worse score."""
        return self.score(stage) < base.score(stage) and self.improvement(base, stage).real

    def score(self, stage: Stage) -> tuple:
        """Lower is better: images diverged up to ``stage``, error there, output error."""
        err, out = self.error(stage), self.error(Stage.OUTPUT)
        return (self.diverged(stage), math.inf if err is None else err, math.inf if out is None else out)

    def subset(self, indices: Sequence[int]) -> "Evaluation":
        """The same evaluation restricted to some images."""
        return Evaluation(self.name, self.culprit, {i: self.outcomes[i] for i in indices if i in self.outcomes},
                          self.hypothesis, self.on_top_of, self.status, self.changes, task_name=self.task_name)

    def with_outcomes(self, outcomes: Mapping[int, ImageOutcome]) -> "Evaluation":
        return dataclasses.replace(self, outcomes=outcomes)

    def with_status(self, status: str) -> "Evaluation":
        return dataclasses.replace(self, status=status)
