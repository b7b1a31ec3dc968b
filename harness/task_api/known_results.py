"""Preflight's known answers of a task's served result, declared by the task.

``harness preflight --record`` keeps, beside the preprocessing's and the classifier's known
answers, what each task's ensembles answer for a few photos (:class:`KnownResults`: which photos,
which outputs); ``harness preflight --task NAME`` asks the task to hold a server's answers to
them (:meth:`harness.task_api.Task.check_known_results`, rows of :class:`KnownCheck`). Preflight
names no task: a new task declares these and edits no preflight file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KnownCheck", "KnownResults"]


@dataclass(frozen=True)
class KnownResults:
    """What preflight records of a task's result: the answers of its ensembles
    ``<prefix>_<pipeline>`` for :attr:`photos`."""

    name: str
    """How the rows and the record name them (``detection``: ``detection dali: boxes``, the
    record's ``detection_photos``)."""
    prefix: str
    """The ensembles answering it, ``<prefix>_<pipeline>`` (``detect``), and the record's arrays'
    prefix (``detect:PHOTO/PIPELINE/OUTPUT``)."""
    photos: tuple[str, ...]
    """The known-answer photos of the corpus (data/photos) the record keeps its answers of."""
    outputs: tuple[str, ...]
    """What the record keeps of each answer."""
    served_by: str
    """What the server must serve to record them, for the row that says how (``the detector``)."""

    def ensemble(self, pipeline: str) -> str:
        return f"{self.prefix}_{pipeline}"


@dataclass(frozen=True)
class KnownCheck:
    """One row of a task's known-answer check (preflight adds the record it compared with)."""

    check: str
    passed: bool
    expected: str = ""
    found: str = ""
    detail: str = ""
