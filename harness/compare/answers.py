"""Classification's served answer (Triton's top-k classes) judged against the photo's answer
alone: the top-1 class must not change and its score must stay within the drift rule (one
deployment against itself: 0.5 in logits, :data:`harness.compare.tolerance.DRIFT_TOLERANCES`;
0.05 in probability, :data:`harness.scores.PROBABILITY_ATOL`). Free of the image libraries:
the Locust image runs it (:data:`harness.task.ANSWER_RULES`)."""

from __future__ import annotations

import math

import numpy as np

from harness.compare.tolerance import DRIFT_TOLERANCES
from harness.scores import PROBABILITY_ATOL
from harness.stage import Stage
from harness.task_api.answers import Answer, Judgement


def top_k(strings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Triton's classification answer (``b"score:index[:label]"`` each) -> (indices, scores)."""
    fields = [(s.decode() if isinstance(s, bytes) else str(s)).split(":") for s in np.asarray(strings).reshape(-1)]
    return np.array([int(f[1]) for f in fields], np.int64), np.array([float(f[0]) for f in fields], np.float64)


def _is_distribution(scores: np.ndarray) -> bool:
    # Probabilities' top-k lie in [0, 1] and sum to at most 1; logits' top-k practically never do.
    return bool(scores.size and scores.min() >= 0 and scores.max() <= 1 and scores.sum() <= 1 + 1e-3)


def judge_top_k(known: Answer, answer: Answer) -> Judgement:
    """A classifier's top-k answer against the known one."""
    [name] = known
    (k_index, k_score), (a_index, a_score) = top_k(known[name]), top_k(answer[name])
    if not a_index.size:
        return Judgement(f"{name}: no class in the answer", math.inf)
    if a_index[0] != k_index[0]:
        return Judgement(f"{name}: top-1 class {a_index[0]} ({a_score[0]:.4g}) where the photo alone answers "
                         f"{k_index[0]} ({k_score[0]:.4g})", math.inf)
    atol = PROBABILITY_ATOL if _is_distribution(k_score) else DRIFT_TOLERANCES[Stage.OUTPUT].atol
    moved = abs(a_score[0] - k_score[0])
    if not math.isfinite(moved) or moved > atol:
        return Judgement(f"{name}: top-1 score {a_score[0]:.4g} where the photo alone answers {k_score[0]:.4g} "
                         f"(tolerance {atol:g})", moved if math.isfinite(moved) else math.inf)
    return Judgement(None, moved)
