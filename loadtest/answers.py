"""Every answer under load checked against the photo's known answer.

Before the users start, each photo is sent alone, one request at a time, and its answer kept
(:class:`KnownAnswers`, recorded where the test starts: the single Locust process, or the
master, which sends it to its workers). During the run every answer to a photo is judged
against that one, by the rule of the task whose answer it is (:func:`rule_for`: the task
registry's :data:`harness.task.ANSWER_RULES`, each rule beside its task's comparator): a
classifier's top-k classes, a detector's boxes, an OCR model's words, a segmenter's mask. A
new task brings its rule there; this module names none.

A wrong answer is a failed request of its own type (:data:`WRONG_ANSWER`) whose detail says
what changed. The judging runs after the request's time is taken, so it never counts in the
latency. Free of Locust and gevent (importable by the tests and the harness).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from harness.task import answer_rule as rule_for  # the rule of the task whose answer it is
from harness.task_api.answers import Answer, Judgement

__all__ = ["WRONG_ANSWER", "Answer", "Judgement", "KnownAnswers", "photo_key", "rule_for"]

WRONG_ANSWER = "wrong answer"
"""The error type of an answer that differs from the photo's answer alone."""


def photo_key(data: bytes) -> str:
    """A photo's name in the record, the same in every process that has the same bytes."""
    return hashlib.sha1(data).hexdigest()[:16]


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
