"""A served answer judged against the same photo's answer alone (the load test and watch).

Each task says what its served answer holds and names the rule that judges it
(:class:`AnswerRule`, declared in the task registry, :data:`harness.task.ANSWER_RULES`); the rule
itself sits beside the task's comparator, in a module free of the image libraries (the Locust
image runs it), and returns a :class:`Judgement`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

__all__ = ["Answer", "AnswerRule", "Judgement"]

Answer = Mapping[str, np.ndarray]
"""One request's outputs by name, batch axis removed."""


@dataclass(frozen=True)
class Judgement:
    """One answer against the known one."""

    change: str | None
    """What changed, in words; None: the answer is the known one (within the rule)."""
    error: float
    """How far it moved: the top-1 score's change (inf when the class changed), or the worst
    box corner's move in pixels (inf when a box came or went)."""


@dataclass(frozen=True)
class AnswerRule:
    """What a task's served answer holds and the rule judging it: ``outputs``, the output names
    that mark an answer as the task's (none: the default's, any other answer), and ``judge``,
    ``module:function`` taking (known, answer) and returning a :class:`Judgement`; named, not
    imported, so that choosing a rule imports only the rule chosen."""

    outputs: tuple[str, ...]
    judge: str

    def load(self) -> Callable[[Answer, Answer], Judgement]:
        module, _, name = self.judge.partition(":")
        return getattr(importlib.import_module(module), name)
