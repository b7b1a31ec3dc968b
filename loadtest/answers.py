"""Every answer under load checked against the photo's known answer.

Before the users start, each photo is sent alone, one request at a time, and its answer kept
(:class:`KnownAnswers`, recorded where the test starts: the single Locust process, or the
master, which sends it to its workers). During the run every answer to a photo is judged
against that one, by the rule of what the model answers:

- **top-k classes** (a classifier asked for ``class_count``): the top-1 class must not change
  and its score must stay within the drift rule (one deployment against itself: 0.5 in logits,
  :data:`harness.compare.tolerance.DRIFT_TOLERANCES`; 0.05 in probability,
  :data:`harness.scores.PROBABILITY_ATOL`);
- **a mask** (a segmenter's ``MATTE``/``MASK``): the segmentation task's comparison
  (:func:`harness.segmentation.compare.compare_masks`); pixels flipped near the threshold are
  a tie there, not a wrong answer;
- **boxes** (a detector's ``BOXES``/``SCORES``): the detection task's comparison
  (:func:`harness.detection.compare.compare_detections`, its documented tolerance); a box that
  comes or goes with a score near the threshold is a tie there, not a wrong answer;
- **words** (an OCR model's ``TEXTS`` beside its boxes): the boxes by that rule, then the word of
  every matched box must be the known one, character for character.

A wrong answer is a failed request of its own type (:data:`WRONG_ANSWER`) whose detail says
what changed. The judging runs after the request's time is taken, so it never counts in the
latency. Free of Locust and gevent (importable by the tests and the harness).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from harness.compare.tolerance import DRIFT_TOLERANCES
from harness.scores import PROBABILITY_ATOL
from harness.stage import Stage
from loadtest.responses import DETECTION_RESULTS, OCR_TEXTS, SEGMENTATION_RESULTS

WRONG_ANSWER = "wrong answer"
"""The error type of an answer that differs from the photo's answer alone."""
DB_BOX_THRESHOLD = 0.5
"""The score threshold a detector's boxes are judged near (the DB postprocessing's default
``box_thresh``, this repository's): a box that comes or goes within 0.05 of it is a tie."""

Answer = Mapping[str, np.ndarray]
"""One request's outputs by name, batch axis removed."""


def photo_key(data: bytes) -> str:
    """A photo's name in the record, the same in every process that has the same bytes."""
    return hashlib.sha1(data).hexdigest()[:16]


def top_k(strings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Triton's classification answer (``b"score:index[:label]"`` each) -> (indices, scores)."""
    fields = [(s.decode() if isinstance(s, bytes) else str(s)).split(":") for s in np.asarray(strings).reshape(-1)]
    return np.array([int(f[1]) for f in fields], np.int64), np.array([float(f[0]) for f in fields], np.float64)


def _is_distribution(scores: np.ndarray) -> bool:
    # Probabilities' top-k lie in [0, 1] and sum to at most 1; logits' top-k practically never do.
    return bool(scores.size and scores.min() >= 0 and scores.max() <= 1 and scores.sum() <= 1 + 1e-3)


@dataclass(frozen=True)
class Judgement:
    """One answer against the known one."""

    change: str | None
    """What changed, in words; None: the answer is the known one (within the rule)."""
    error: float
    """How far it moved: the top-1 score's change (inf when the class changed), or the worst
    box corner's move in pixels (inf when a box came or went)."""


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


def judge_boxes(known: Answer, answer: Answer) -> Judgement:
    """A detector's boxes against the known ones, by the detection task's rule."""
    from harness.detection.boxes import Detections
    from harness.detection.compare import compare_detections
    from harness.verdict import Verdict

    boxes, scores = DETECTION_RESULTS
    comparison = compare_detections(Detections(known[boxes], known[scores]), Detections(answer[boxes], answer[scores]),
                                    DB_BOX_THRESHOLD)
    worst = max((m.corner_px for m in comparison.matches), default=0.0)
    error = math.inf if comparison.missed or comparison.extra else worst
    if comparison.verdict is not Verdict.DIVERGED:
        return Judgement(None, error)
    return Judgement(f"{len(answer[scores])} boxes where the photo alone answers {len(known[scores])}: "
                     f"{len(comparison.missed)} missed, {len(comparison.extra)} extra, worst corner moved {worst:.1f} px"
                     + (f"; {'; '.join(comparison.problems)}" if comparison.problems else ""), error)


def judge_words(known: Answer, answer: Answer) -> Judgement:
    """An OCR model's boxes by :func:`judge_boxes`, then the words of the matched boxes: equal."""
    from harness.detection.boxes import Detections
    from harness.detection.compare import compare_detections

    judged = judge_boxes(known, answer)
    if judged.change is not None:
        return judged
    boxes, scores = DETECTION_RESULTS
    comparison = compare_detections(Detections(known[boxes], known[scores]), Detections(answer[boxes], answer[scores]),
                                    DB_BOX_THRESHOLD)

    def text(value) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    known_texts = np.asarray(known[OCR_TEXTS]).reshape(-1)
    answer_texts = np.asarray(answer[OCR_TEXTS]).reshape(-1)
    changed = [(text(known_texts[m.reference]), text(answer_texts[m.deployed])) for m in comparison.matches
               if text(known_texts[m.reference]) != text(answer_texts[m.deployed])]
    if changed:
        return Judgement(f"{len(changed)} of {len(comparison.matches)} words read otherwise than the photo alone: "
                         + ", ".join(f"{a!r} where it answers {k!r}" for k, a in changed[:3]), math.inf)
    return judged


MASK_MARGIN = 0.1
"""A segmenter's flipped pixels count as near its threshold within this of it (the
segmentation task's default margin, :data:`harness.task.segmentation.NEAR_THRESHOLD`)."""


def judge_mask(known: Answer, answer: Answer) -> Judgement:
    """A segmenter's matte and mask against the known ones, by the segmentation task's rule
    (:func:`harness.segmentation.compare.compare_masks`): a mask changed beyond the close rule,
    other than by pixels near the threshold, is a wrong answer; the error is the matte's."""
    from harness.segmentation.compare import compare_masks
    from harness.verdict import Verdict

    def result(a: Answer) -> np.ndarray:
        matte = np.asarray(a[SEGMENTATION_RESULTS[0]], np.float32)
        return np.stack([matte, np.asarray(a[SEGMENTATION_RESULTS[1]], np.float32).reshape(matte.shape)])

    verdict, m = compare_masks(result(known), result(answer), MASK_MARGIN)
    error = m.get("matte_mae", math.inf)
    if verdict is not Verdict.DIVERGED:
        return Judgement(None, error)
    return Judgement(m.get("problem") or f"mask IoU {m['iou']:.4f} with the photo's alone: {m['flipped']} pixels flipped "
                     f"({m['far_flipped']} far from the threshold), matte error {m['matte_mae']:.4g}", math.inf)


def rule_for(answer: Answer) -> Callable[[Answer, Answer], Judgement]:
    """The rule judging answers shaped like ``answer``."""
    if set(DETECTION_RESULTS) <= set(answer):
        return judge_words if OCR_TEXTS in answer else judge_boxes
    return judge_mask if set(SEGMENTATION_RESULTS) <= set(answer) else judge_top_k


@dataclass
class KnownAnswers:
    """Each photo's answer alone, by :func:`photo_key`."""

    answers: dict[str, dict[str, np.ndarray]]

    def judge(self, key: str, answer: Answer) -> Judgement | None:
        """``answer`` to the photo ``key`` judged against its known one; None: none is known."""
        known = self.answers.get(key)
        return None if known is None else rule_for(known)(known, answer)

    def to_message(self) -> dict:
        """A form Locust's messages carry (msgpack: bytes, strings, lists)."""
        return {key: {name: [a.dtype.str, list(a.shape), a.tobytes()] if a.dtype != object
                      else ["O", list(a.shape), [bytes(s) for s in a.reshape(-1)]]
                      for name, a in answer.items()} for key, answer in self.answers.items()}

    @classmethod
    def from_message(cls, message: dict) -> "KnownAnswers":
        def array(dtype, shape, data) -> np.ndarray:
            if dtype == "O":
                return np.array(list(data), dtype=object).reshape(shape)
            return np.frombuffer(data, np.dtype(dtype)).reshape(shape).copy()
        return cls({key: {name: array(*value) for name, value in answer.items()} for key, answer in message.items()})
