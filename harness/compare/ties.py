"""Near ties: a top-1 change that the output stage's error can explain.

When the reference's two best classes are nearly tied, logits that move by no more than
the output stage's normal error can swap them. Such a flip says nothing about the
preprocessing: no change to it could fix the image. It is reported as a **tie**, counted
and listed, but it is not a divergence.

The rule, per image (:func:`flip_verdict`; :func:`margin_verdict` once the margin is
known): the top-1 class changed, and the reference's margin between its own top-1 score
and its score for the class the deployed side ranks first is at most ``tie_margin``, in the
units of the scores compared (logits, or probability for a deployment answering
probabilities: :mod:`harness.scores`). By default ``tie_margin`` is the ``output``
stage's absolute tolerance (:func:`default_tie_margin`): an error the output is allowed
to have may reorder classes that close.

A tie must be explained by what came before the result step (:func:`explained_by_upstream`,
applied to every task's result stage): where the result step run alone on the reference's
own output diverges (its isolated verdict), or where the raw outputs are identical, the
change is the result step's own doing, and the stage is diverged whatever the margins say.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from harness.result import ImageResult, StageResult
from harness.stage import Stage
from harness.tolerance import Tolerance
from harness.verdict import Verdict


def default_tie_margin(tolerances: Mapping[str, Tolerance]) -> float:
    """The ``output`` stage's ``atol`` (0.5 logits, 0.05 probability, unless the spec overrides it)."""
    return tolerances[Stage.OUTPUT].atol


def reference_margin(reference_scores: np.ndarray, deployed_top1: int) -> float:
    """How far, in the reference's own scores (logits or probabilities), its top-1 class is
    ahead of ``deployed_top1`` (0.0 when the two sides agree; never negative)."""
    ref = np.asarray(reference_scores, dtype=np.float64).ravel()
    return float(ref.max() - ref[deployed_top1])


def margin_verdict(margin: float, tie_margin: float) -> Verdict:
    """A changed top-1 with this reference margin: :attr:`Verdict.TIE` when ``margin`` is
    at most ``tie_margin``, else :attr:`Verdict.DIVERGED`. The one place the rule lives."""
    return Verdict.TIE if margin <= tie_margin else Verdict.DIVERGED


def flip_verdict(reference_logits: np.ndarray, deployed_top1: int, tie_margin: float) -> Verdict | None:
    """The verdict on one image's top-1 class, given the reference's logits and the class
    the deployed side ranks first (e.g. ``int(np.argmax(deployed_logits))``): None when it
    is the reference's top-1 too, else :func:`margin_verdict` of :func:`reference_margin`.

    A pure function, for ``check``, ``accuracy`` and ``diagnose``."""
    ref = np.asarray(reference_logits, dtype=np.float64).ravel()
    if int(np.argmax(ref)) == int(deployed_top1):
        return None
    return margin_verdict(reference_margin(ref, deployed_top1), tie_margin)


def explained_by_upstream(result: StageResult, output: StageResult | None) -> StageResult:
    """``result`` (a task's result stage of one image) with its ties held to what explains them.

    - The result step run alone on the reference's output (``result.isolated_verdict``)
      diverged: the step itself makes a different result from the same input (a postprocessing
      parameter, an NMS, a threshold), so the stage is diverged, ties or not.
    - A tie where the raw outputs are identical (``output`` equal): nothing before the result
      step differs, so nothing explains it; the stage is diverged.

    Otherwise ``result`` as it is. The metrics say why under ``unexplained``."""
    why = None
    if result.isolated_verdict is Verdict.DIVERGED and result.verdict is not Verdict.DIVERGED:
        why = (f"run alone on the reference's output, the deployed {result.stage} step diverges: its changes are its "
               "own, not the output's noise")
    elif result.verdict is Verdict.TIE and output is not None and output.verdict is Verdict.EQUAL:
        why = "the raw outputs are identical: nothing before the result step explains its changes"
    if why is None:
        return result
    return dataclasses.replace(result, verdict=Verdict.DIVERGED, metrics={**result.metrics, "unexplained": why})


def made_by(result: ImageResult) -> str:
    """Which stage made one image's result change, in words: the first stage before the result
    that adds an error of its own (its isolated run on the reference's previous stage not equal;
    without one, its own verdict), with that verdict and its largest error, e.g. ``resize (close:
    max 2)``; ``postprocess`` when every stage before it matches (the result step's own doing).
    The "made by" of a changed mask or box: a tie's evidence, a divergence's stage."""
    for stage in result.stages:
        if stage.stage == Stage.POSTPROCESS:
            break
        verdict = stage.isolated_verdict or stage.verdict
        if verdict is Verdict.EQUAL:
            continue
        metrics = stage.isolated if stage.isolated_verdict is not None and stage.isolated else stage.metrics
        worst = metrics.get("max_abs")
        shown = f"max {worst:.3g}" if isinstance(worst, (int, float)) and np.isfinite(worst) else "its shape"
        return f"{stage.stage} ({verdict.value}: {shown})"
    return str(Stage.POSTPROCESS)


def explained_event(stage: Stage, event: Verdict | str, output: Verdict | str) -> Verdict:
    """:func:`explained_by_upstream` of one image's result-stage verdict and output verdict
    alone (diagnose keeps verdicts, not stage results)."""
    return explained_by_upstream(StageResult(stage, Verdict(event), {}), StageResult(Stage.OUTPUT, Verdict(output), {})).verdict
