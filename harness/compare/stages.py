"""Every stage of one image compared: the one routine behind ``check`` and ``compare``."""

from __future__ import annotations

import numpy as np

from harness.compare.comparators import TOP_K, Arrays, TopKTolerance
from harness.compare.ties import default_tie_margin, explained_by_upstream
from harness.result import StageResult
from harness.scores import LOGITS, ScoreKind
from harness.stage import DEFAULT_TOP_K, TENSOR_STAGES, Stage
from harness.tolerance import Tolerance


def as_8bit(image: np.ndarray) -> np.ndarray:
    """An image stage holding whole levels 0..255 as uint8 (the taps send resized and
    cropped images as float32 whatever their type), so it compares on the exact 8-bit path."""
    if image.dtype == np.float32 and image.ndim == 3:
        as_uint8 = image.astype(np.uint8)
        if np.array_equal(as_uint8, image):
            return as_uint8
    return image


def compare_stages(reference: dict[str, np.ndarray], deployed: dict[str, np.ndarray],
                   tolerances: dict[str, Tolerance], isolated: dict[str, np.ndarray] | None = None,
                   top_k: int = DEFAULT_TOP_K, tie_margin: float | None = None,
                   scores: ScoreKind = LOGITS, result=None) -> tuple[StageResult, ...]:
    """Each stage both sides have, in pipeline order, then the task's result stage:
    ``result(reference, deployed, isolated, tie_margin, top_k, scores)`` on the stage dicts (a
    task's :meth:`~harness.task.Task.result_of`), by default classification's ``topk`` of the outputs.

    ``isolated`` holds the deployed stages run alone on the reference's previous stage;
    where present they are compared too (the error a stage adds by itself). ``scores``: what
    both outputs hold (probabilities are also compared as distributions). A top-1 change
    within ``tie_margin`` (in the scores' units) of the reference's margin is a tie (default:
    the output tolerance, :func:`harness.compare.ties.default_tie_margin`), and only where what
    came before the result step explains it (:func:`harness.compare.ties.explained_by_upstream`).
    """
    isolated = isolated or {}
    if tie_margin is None:
        tie_margin = default_tie_margin(tolerances)
    results = []
    for stage in TENSOR_STAGES:
        if stage not in reference or stage not in deployed:
            continue
        image = stage.is_image
        convert = as_8bit if image else (lambda x: x)
        arrays = Arrays(image, distribution=stage is Stage.OUTPUT and scores.distribution)
        results.append(arrays.stage(stage, convert(reference[stage]), convert(deployed[stage]),
                                    convert(isolated[stage]) if stage in isolated else None, tolerances[stage]))
    last = (result or topk_of_outputs)(reference, deployed, isolated, tie_margin, top_k, scores)
    if last is None:
        return tuple(results)
    output = next((r for r in results if r.stage is Stage.OUTPUT), None)
    return (*results, explained_by_upstream(last, output))


def topk_of_outputs(reference: dict, deployed: dict, isolated: dict, tie_margin: float, top_k: int,
                    scores: ScoreKind = LOGITS) -> StageResult | None:
    """Classification's result stage from two stage dicts (what :meth:`harness.task.Task.result_of`
    does by default): ``topk`` of their outputs, None when a side has none."""
    out = Stage.OUTPUT
    if out not in reference or out not in deployed:
        return None
    return topk_result(reference[out], deployed[out], isolated.get(out), tie_margin, top_k, scores)


def topk_result(reference: np.ndarray, deployed: np.ndarray, isolated: np.ndarray | None, tie_margin: float,
                top_k: int, scores: ScoreKind = LOGITS) -> StageResult:
    """Classification's result stage, ``topk``, of one image's scores (and the isolated classifier's)."""
    return TOP_K.stage(Stage.TOPK, reference, deployed, isolated, TopKTolerance(tie_margin, top_k, scores))
