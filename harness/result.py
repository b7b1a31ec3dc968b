"""Small result objects of a comparison (a stage of one image, an image), and their plain-dict form
(JSON lines, reports): vocabulary, so that a task (:mod:`harness.task_api`) can speak it."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.files import from_json_safe
from harness.outcome import Outcome, Side
from harness.stage import Stage
from harness.verdict import Verdict

SIDES = tuple(Side)
"""Who can reject an image: the deployed server, or the training (reference) recipe."""


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its message's first line, with the type when the
    message alone would not say what happened (cv2.error, MemoryError, KeyError, ...)."""
    lines = str(exc).strip().splitlines()
    message = next((line.strip() for line in lines if line.strip()), "")
    # messages written to be read alone
    if message and type(exc).__name__ in ("ImageError", "InferenceError", "PostprocessError"):
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@dataclass(frozen=True)
class StageResult:
    """One stage of one image: cumulative comparison, and the stage's error in isolation."""

    stage: Stage
    verdict: Verdict
    metrics: dict
    isolated_verdict: Verdict | None = None
    isolated: dict | None = None
    """The deployed implementation of this stage fed the reference's previous stage: the
    error this stage adds by itself (None where there is no previous stage to feed)."""
    histogram: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ImageResult:
    """All stages of one image, or why it could not be compared.

    Five outcomes: compared (``stages``); failed on both sides or before either ran
    (``error``); rejected by one side while the other accepted it (``error`` and
    ``rejected_by``, one of :data:`SIDES`); or skipped, a folder entry that is not an input
    (``error`` and ``skipped``). A one-sided rejection is a divergence of its own: one side
    cannot process an image the other can. ``image`` is a :func:`harness.names.identifier`."""

    image: str
    stages: tuple[StageResult, ...] = ()
    error: str | None = None
    rejected_by: str | None = None
    skipped: bool = False
    task_data: dict | None = None
    """What the task keeps of this image for its run-level events (JSON-able; e.g. the two
    normalized embeddings): :meth:`harness.task.Task.image_data`. None: nothing."""

    @property
    def failed(self) -> bool:
        """Failed on both sides (or unreadable): not a one-sided rejection, not skipped."""
        return self.error is not None and self.rejected_by is None and not self.skipped

    @property
    def outcome(self) -> Outcome:
        if self.skipped:
            return Outcome.SKIPPED
        if self.rejected_by:
            return Outcome.rejected_by(self.rejected_by)
        return Outcome.FAILED if self.error is not None else Outcome.COMPARED

    @property
    def first_divergent(self) -> Stage | None:
        return next((s.stage for s in self.stages if s.verdict is Verdict.DIVERGED), None)

    def stage(self, name: Stage) -> StageResult | None:
        return next((s for s in self.stages if s.stage == name), None)

    def to_dict(self) -> dict:
        """The plain form (one line of images.jsonl); non-finite metrics stay floats here:
        write it with :func:`harness.files.strict_json`."""
        # By hand rather than dataclasses.asdict: that deep-copies every metrics dict.
        stages = [{"stage": s.stage, "verdict": s.verdict.value, "metrics": s.metrics,
                   "isolated_verdict": s.isolated_verdict.value if s.isolated_verdict else None,
                   "isolated": s.isolated, "histogram": s.histogram} for s in self.stages]
        out = {"image": self.image, "outcome": self.outcome.value, "stages": stages, "error": self.error,
               "rejected_by": self.rejected_by}
        if self.task_data is not None:
            out["task_data"] = self.task_data
        return {**out, "skipped": True} if self.skipped else out

    @staticmethod
    def from_dict(d: dict) -> "ImageResult":
        """The inverse of :meth:`to_dict`, also of its strict-JSON form (``"inf"`` read back
        as a float); raises ``KeyError``, ``ValueError`` or ``TypeError`` for anything else."""
        stages = tuple(
            StageResult(Stage(s["stage"]), Verdict(s["verdict"]), from_json_safe(s["metrics"]),
                        Verdict(s["isolated_verdict"]) if s.get("isolated_verdict") else None,
                        from_json_safe(s.get("isolated")), s.get("histogram", []))
            for s in d.get("stages", ())
        )
        image, error = d["image"], d.get("error")
        if not isinstance(image, str) or not (error is None or isinstance(error, str)):
            raise TypeError("image and error must be strings")
        return ImageResult(image, stages, error, d.get("rejected_by"), bool(d.get("skipped", False)),
                           d.get("task_data"))
