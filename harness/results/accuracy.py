"""``harness accuracy``'s report type: :class:`AccuracyReport`, one for every task: what produced
the run, the images left out, and the task's effect (:mod:`harness.task_api.effect`), which
accuracy.json holds under ``effect``. The writer (accuracy.md, the files) is
:mod:`harness.accuracy.report`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from harness.outcome import Side
from harness.results.interface import Case, Status, issue_cases
from harness.results.sides import ReferenceInfo, ServerInfo, Versions
from harness.results.summary import ImageIssue
from harness.stage import DEFAULT_TOP_K
from harness.verdict import ties_fail as _ties_fail

# The job's own types, which this module reads by their attributes only: named here, not
# imported, so that the run model imports no job (tests/test_imports.py counts every import).
Dataset = Sample = Any
"""harness.accuracy.dataset's."""

LAYOUT = "effect"
"""accuracy.json's layout: every task's scores under ``effect`` (a file without it is the old
classification layout, scores at the top level: :func:`harness.accuracy.shards.read_accuracy_json`)."""


@dataclass(frozen=True)
class AccuracyRun:
    seconds: float
    batch_size: int
    fail_on: str
    allow_rejected: bool
    tie_margin: float = 0.0
    """The tie margin the effect's events were judged by, in the units the task judges them in."""
    top_k: int = DEFAULT_TOP_K
    """``--top-k``: classes kept per image (a classifier's top-k accuracy)."""


@dataclass(frozen=True)
class AccuracyReport:
    """One ``harness accuracy`` run of any task: its effect on the labeled set
    (:meth:`harness.task_api.Task.effect_on`) and what produced it."""

    task: str
    effect: object
    """The task's effect: ``to_dict(names)``, ``markdown(names)``, ``any_changes(ties)``, ``cases(...)``;
    None when no image was processed on every path."""
    dataset: "Dataset"
    evaluated: tuple["Sample", ...]
    """The images every path processed: the only ones scored, on every path."""
    failed: Mapping[str, str]
    """Image name -> why it was left out of every path ("dali: truncated JPEG ...")."""
    outcomes: Mapping[str, str]
    """Image name -> ``failed``, ``rejected by deployment`` or ``rejected by training``."""
    paths: tuple[str, ...]
    """The deployed paths (their labels), in the effect's order after the reference."""
    models: tuple[str, ...]
    """The model serving each deployed path (``classify_dali``, or the ``--model`` named)."""
    reference: ReferenceInfo
    server: ServerInfo
    spec: str
    run: AccuracyRun | None = None
    versions: Versions = field(default_factory=dict)
    processed: str = "processed"
    """What every path did to an image scored (:attr:`harness.task_api.Task.processed_word`)."""

    def any_rejected(self) -> bool:
        """Did one side alone reject some image?"""
        return any(o == f"rejected by {side}" for o in self.outcomes.values() for side in Side)

    def rejected(self, side: str) -> int:
        return sum(o == f"rejected by {side}" for o in self.outcomes.values())

    # -- the report interface (harness.results.interface) --

    job: ClassVar[str] = "accuracy"

    @property
    def title(self) -> str:
        return (f"Effect on a labeled set ({self.task}): {', '.join(self.models)} vs the training reference on "
                f"{self.dataset.source}")

    @property
    def verdict(self) -> str:
        """``unchanged``, ``tie`` (changes within the tie margin only), ``diverged``,
        ``rejected`` (an image one side only rejects) or ``nothing processed``."""
        if not self.evaluated:
            return f"nothing {self.processed}" if self.dataset.samples else "unchanged"
        if self.any_rejected() and not _allowed(self.run):
            return "rejected"
        return "diverged" if self.effect.any_changes(ties=False) else "tie" if self.effect.any_changes() else "unchanged"

    @property
    def passed(self) -> bool:
        """Exit status 0 (:meth:`harness.accuracy.job.AccuracyResult.exit_status`)."""
        if not self.dataset.samples:
            return True  # a shard holding no image: the merged report is the verdict
        if not self.evaluated or (self.any_rejected() and not _allowed(self.run)):
            return False
        return not self.effect.any_changes(ties=_ties_fail(_fail_on(self.run)))

    def cases(self) -> list[Case]:
        """Each deployed path's changes as the task's effect says them (failed beyond the tie
        margin, or on any with ``--fail-on tie``), each image left out of every path (rejected
        by one side only: failed unless allowed), and an error when no image was processed on
        every path."""
        cases = []
        if self.evaluated and self.effect is not None:
            cases += self.effect.cases(self.models, _ties_fail(_fail_on(self.run)), f"accuracy.{self.task}")
        issues = [ImageIssue(name, reason, self.outcomes.get(name, "failed")) for name, reason in self.failed.items()]
        cases += issue_cases("accuracy", issues, allow_rejected=_allowed(self.run))
        if self.dataset.samples and not self.evaluated:
            cases.append(Case("images", "accuracy", Status.ERROR,
                              f"none of the {len(self.dataset.samples)} images could be {self.processed} on every path"))
        return cases

    def to_dict(self) -> dict:
        """accuracy.json: the task, its effect, the images left out, the context."""
        names = [s.name for s in self.evaluated]
        out = {"task": self.task, "reference": self.reference.to_dict(),
               "deployed": {"pipelines": list(self.paths), "models": list(self.models), "url": self.server.url,
                            "protocol": self.server.protocol},
               "spec": self.spec}
        if self.run is not None:
            out["run"] = dataclasses.asdict(self.run)
        if self.versions:
            out["versions"] = dict(self.versions)
        labels = [self.dataset.label_name(s) for s in self.evaluated]
        return {**out,
                "dataset": {"source": str(self.dataset.source), "layout": self.dataset.layout,
                            "labeled": self.dataset.labeled, "images": len(self.dataset.samples),
                            "evaluated": len(self.evaluated), "failed": len(self.failed),
                            "rejected": {side: self.rejected(side) for side in Side},
                            "labels": sorted({self.dataset.label_name(s) for s in self.dataset.samples
                                              if s.label is not None}),
                            "skipped": [{"image": s.name, "reason": s.reason} for s in self.dataset.skipped]},
                LAYOUT: None if self.effect is None else self.effect.to_dict(names),
                "failed": [{"image": n, "reason": r, "outcome": self.outcomes.get(n, "failed")}
                           for n, r in self.failed.items()],
                "images": [{"image": n, "label": label} for n, label in zip(names, labels)]}


def _allowed(run: AccuracyRun | None) -> bool:
    return bool(run and run.allow_rejected)


def _fail_on(run: AccuracyRun | None) -> str:
    return run.fail_on if run else "diverged"
