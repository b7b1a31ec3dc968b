"""The task API: what a task is and how its results are judged, below every mechanism and task.

:mod:`.task` (:class:`Task`, its events, report sections and typed hooks) and
:mod:`.comparator` (the comparison protocol: :class:`Comparator`, :class:`Comparison`,
:class:`Fold`); :mod:`.answers` (a served answer against the photo's answer alone:
:class:`AnswerRule`, :class:`Judgement`). It imports only the vocabulary, so the mechanisms (deployment, compare, report)
speak it without knowing any task, and the tasks (:mod:`harness.task`, at the top) implement
it. A task needs nothing but this package: the vocabulary it speaks comes with it.
"""

from harness.result import ImageResult, StageResult
from harness.scores import ScoreKind
from harness.stage import Stage
from harness.task_api.answers import Answer, AnswerRule, Judgement
from harness.task_api.comparator import Comparator, Comparison, Fold
from harness.task_api.effect import Observed
from harness.task_api.known_results import KnownCheck, KnownResults
from harness.task_api.task import (
                                   Event,
                                   Events,
                                   OutputChoice,
                                   PostprocessError,
                                   ResultCulprit,
                                   Section,
                                   Task,
                                   claim,
                                   like,
                                   verdict_cells,
                                   without_leading_ones,
)
from harness.tolerance import Tolerance
from harness.verdict import Verdict

__all__ = ["Answer", "AnswerRule", "Comparator", "Comparison", "Event", "Events", "Fold", "ImageResult", "Judgement",
           "KnownCheck", "KnownResults", "Observed", "OutputChoice", "PostprocessError", "ResultCulprit", "ScoreKind", "Section",
           "Stage", "StageResult", "Task", "Tolerance", "Verdict", "claim", "like", "verdict_cells",
           "without_leading_ones"]
