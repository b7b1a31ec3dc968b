"""``harness accuracy``'s report type: :class:`AccuracyReport`, the scores and what produced
them; accuracy.json is its ``to_dict``. The writer (accuracy.md, the files) is
:mod:`harness.accuracy.report`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from harness.outcome import Side
from harness.results.interface import Case, Status, issue_cases
from harness.results.sides import ReferenceInfo, ServerInfo, Versions
from harness.results.summary import ImageIssue
from harness.verdict import ties_fail as _ties_fail

# The job's own types, which this module reads by their attributes only: named here, not
# imported, so that the run model imports no job (tests/test_imports.py counts every import).
Dataset = Sample = Any
"""harness.accuracy.dataset's."""
AccuracyResult = PathScore = Any
"""harness.accuracy.scoring's."""


@dataclass(frozen=True)
class AccuracyRun:
    seconds: float
    batch_size: int
    fail_on: str
    allow_rejected: bool


@dataclass(frozen=True)
class AccuracyReport:
    """One ``harness accuracy`` run: the scores and what produced them."""

    result: AccuracyResult
    classes: Sequence[str]
    """The model's class names, in output order."""
    reference: ReferenceInfo
    server: ServerInfo
    spec: str
    run: AccuracyRun | None = None
    versions: Versions = field(default_factory=dict)

    processed: ClassVar[str] = "classified"
    """What every path did to an image scored (the error when none was)."""

    @property
    def dataset(self) -> Dataset:
        return self.result.dataset

    @property
    def evaluated(self) -> tuple[Sample, ...]:
        """The images every path classified."""
        return self.result.evaluated

    @property
    def failed(self) -> Mapping[str, str]:
        """Image name -> why it was left out of every path."""
        return self.result.failed

    @property
    def reference_score(self) -> PathScore:
        return self.result.scores[0]

    @property
    def deployed_scores(self) -> tuple[PathScore, ...]:
        return self.result.scores[1:]

    def any_flips(self, ties: bool = True) -> bool:
        """Does some deployed path change the reference's top-1 class on some image (beyond
        the tie margin unless ``ties``)?"""
        return any(s.flips if ties else s.diverged_flips for s in self.deployed_scores)

    def any_rejected(self) -> bool:
        """Did one side alone reject some image?"""
        return any(self.result.rejected(side) for side in Side)

    def label_name(self, sample: Sample) -> str | None:
        return None if sample.label is None else self.classes[sample.label]

    # -- the report interface (harness.results.interface) --

    job: ClassVar[str] = "accuracy"

    @property
    def title(self) -> str:
        paths = ", ".join(str(ensemble(s.path)) for s in self.deployed_scores)
        return f"Accuracy: {paths} vs the training reference on {self.result.dataset.source}"

    @property
    def verdict(self) -> str:
        """``agree``, ``tie`` (only top-1 changes within the tie margin), ``diverged`` (one
        beyond it), ``rejected`` (an image one side only rejects) or ``nothing classified``."""
        if not self.result.evaluated:
            return "nothing classified" if self.result.dataset.samples else "agree"
        if self.any_rejected() and not _allowed(self.run):
            return "rejected"
        return "diverged" if self.any_flips(ties=False) else "tie" if self.any_flips() else "agree"

    @property
    def passed(self) -> bool:
        """Exit status 0 (:meth:`harness.accuracy.job.AccuracyResult.exit_status`)."""
        result = self.result
        if not result.dataset.samples:
            return True  # a shard holding no image: the merged report is the verdict
        if not result.evaluated or (self.any_rejected() and not _allowed(self.run)):
            return False
        return not self.any_flips(ties=_ties_fail(_fail_on(self.run)))

    def cases(self) -> list[Case]:
        """Each deployed path's top-1 changes against the reference (failed beyond the tie
        margin, or on any with ``--fail-on tie``), each image left out of every path
        (rejected by one side only: failed unless allowed), and an error when no image was
        classified on every path."""
        result, evaluated = self.result, len(self.result.evaluated)
        ties_fail = _ties_fail(_fail_on(self.run))
        cases = []
        for s in self.deployed_scores:
            flipped = [(s.flip_verdicts[x.name], x.name) for x in result.evaluated if x.name in s.flip_verdicts]
            failing = [name for (verdict, _), name in flipped if ties_fail or verdict == "diverged"]
            scores = (f"top-1 {_percent(s.top1)} ({points(s.top1, self.reference_score.top1):+.2f} points vs the "
                      "reference)" if s.top1 is not None and self.reference_score.top1 is not None else "")
            if failing:
                what = "change top-1" + ("" if ties_fail else " beyond the tie margin")
                reason = (f"{len(failing)} of {evaluated} images {what} ({s.ties or 0} ties in all): "
                          + ", ".join(failing[:10]) + (", ..." if len(failing) > 10 else ""))
            else:
                reason = f"no top-1 change beyond the tie margin on {evaluated} images ({s.ties or 0} ties)"
            details = "\n".join(f"{name}: {verdict}, reference margin {margin:.4g}" for (verdict, margin), name in flipped)
            cases.append(Case(str(ensemble(s.path)), "accuracy.top-1", Status.FAILED if failing else Status.PASSED,
                              "; ".join(x for x in (reason, scores) if x), details))
        issues = [ImageIssue(name, reason, result.outcomes.get(name, "failed")) for name, reason in result.failed.items()]
        cases += issue_cases("accuracy", issues, allow_rejected=_allowed(self.run))
        if result.dataset.samples and not result.evaluated:
            cases.append(Case("images", "accuracy", Status.ERROR,
                              f"none of the {len(result.dataset.samples)} images could be classified on every path"))
        return cases

    def to_dict(self) -> dict:
        """accuracy.json: the scores, every image's predictions, the failed images, the context."""
        result, k = self.result, self.result.k
        out = {"reference": self.reference.to_dict(),
               "deployed": {"pipelines": [s.path for s in self.deployed_scores], "url": self.server.url,
                            "protocol": self.server.protocol},
               "spec": self.spec}
        if self.run is not None:
            out["run"] = {"seconds": self.run.seconds, "batch_size": self.run.batch_size,
                          "fail_on": self.run.fail_on, "allow_rejected": self.run.allow_rejected}
        if self.versions:
            out["versions"] = dict(self.versions)
        return {
            **out,
            "dataset": {"source": str(result.dataset.source), "layout": result.dataset.layout,
                        "labeled": result.dataset.labeled, "images": len(result.dataset.samples),
                        "evaluated": len(result.evaluated), "failed": len(result.failed),
                        "rejected": {side: result.rejected(side) for side in Side},
                        "classes": sorted({self.label_name(s) for s in result.dataset.samples if s.label is not None}),
                        "skipped": [{"image": s.name, "reason": s.reason} for s in result.dataset.skipped]},
            "top_k": k,
            "paths": [self._path_dict(s) for s in result.scores],
            "tie_margin": result.tie_margin,
            "failed": [{"image": name, "reason": reason, "outcome": result.outcomes.get(name, "failed")}
                       for name, reason in result.failed.items()],
            "images": [{"image": s.name, "label": self.label_name(s),
                        "top1": {path: self.classes[top[s.name][0]] for path, top in result.predictions.items()},
                        f"top{k}": {path: list(top[s.name]) for path, top in result.predictions.items()},
                        "flips": {score.path: {"verdict": score.flip_verdicts[s.name][0],
                                               "margin": _finite(score.flip_verdicts[s.name][1])}
                                  for score in result.scores if s.name in score.flip_verdicts}}
                       for s in result.evaluated],
        }

    def _path_dict(self, s: PathScore) -> dict:
        k, reference = self.result.k, self.reference_score
        entry = {"path": s.path, "ensemble": ensemble(s.path), "top1": s.top1, f"top{k}": s.topk,
                 "recall_macro": s.recall, "precision_macro": s.precision}
        if s is not reference:
            entry["diff_points"] = {key: points(value, base) for key, value, base in compared_scores(s, reference, k)}
            entry["flips"], entry["flip_rate"] = s.flips, s.flip_rate
            entry["ties"], entry["diverged_flips"] = s.ties, s.diverged_flips
            entry["flip_rate_without_ties"] = rate(s.diverged_flips, len(self.result.evaluated))
            entry["mcnemar"] = ({"b": s.mcnemar.b, "c": s.mcnemar.c, "p_value": s.mcnemar.p_value}
                                if s.mcnemar else None)
        entry["per_class"] = [{"index": c.index, "class": c.name, "images": c.images, "recall": c.recall,
                               "precision": c.precision} for c in s.per_class]
        return entry


def _allowed(run: AccuracyRun | None) -> bool:
    return bool(run and run.allow_rejected)


def _fail_on(run: AccuracyRun | None) -> str:
    return run.fail_on if run else "diverged"


def _percent(value: float) -> str:
    return f"{100 * value:.2f}%"


def compared_scores(s: PathScore, reference: PathScore, k: int) -> list[tuple[str, float | None, float | None]]:
    """(JSON key, this path's value, the reference's) of each score compared in points."""
    return [("top1", s.top1, reference.top1), (f"top{k}", s.topk, reference.topk),
            ("recall_macro", s.recall, reference.recall), ("precision_macro", s.precision, reference.precision)]


def ensemble(path: str) -> str | None:
    """The model a deployed path is served by: a pipeline's ensemble, or the model named (None for the reference)."""
    from harness.client import PIPELINES  # here, not above: importing the run model stays light (no decoders)

    if path in PIPELINES:
        return PIPELINES[path].ensemble
    return None if path == "reference" else path


def rate(count: int | None, total: int) -> float | None:
    return count / total if count is not None and total else None


def _finite(value: float) -> float | None:
    """None for inf (strict JSON)."""
    return value if math.isfinite(value) else None


def points(value: float | None, reference: float | None) -> float | None:
    return None if value is None or reference is None else round(100 * (value - reference), 6)


@dataclass(frozen=True)
class EffectReport:
    """``harness accuracy`` for a task other than classification: the task's effect on the
    labeled set (:meth:`harness.task.Task.effect`, e.g. embeddings' retrieval) and what produced it."""

    task: str
    effect: object
    """The task's effect: ``to_dict(names)``, ``markdown(names)`` and ``any_changes(ties)``."""
    dataset: "Dataset"
    evaluated: tuple["Sample", ...]
    """The images every path processed, in the effect's order."""
    failed: Mapping[str, str]
    outcomes: Mapping[str, str]
    paths: tuple[str, ...]
    """The deployed paths (their labels), in the effect's order after the reference."""
    models: tuple[str, ...]
    """The model serving each deployed path (``embed_dali``, or the ``--model`` named)."""
    reference: ReferenceInfo
    server: ServerInfo
    spec: str
    run: AccuracyRun | None = None
    versions: Versions = field(default_factory=dict)

    processed: ClassVar[str] = "processed"
    """What every path did to an image scored (the error when none was)."""

    def any_rejected(self) -> bool:
        return any(o == side_outcome for o in self.outcomes.values() for side_outcome in
                   (f"rejected by {side}" for side in Side))

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
            return "nothing processed"
        if self.any_rejected() and not _allowed(self.run):
            return "rejected"
        return "diverged" if self.effect.any_changes(ties=False) else "tie" if self.effect.any_changes() else "unchanged"

    @property
    def passed(self) -> bool:
        """Exit status 0 (:meth:`harness.accuracy.job.AccuracyResult.exit_status`)."""
        if not self.evaluated or (self.any_rejected() and not _allowed(self.run)):
            return False
        return not self.effect.any_changes(ties=_ties_fail(_fail_on(self.run)))

    def cases(self) -> list[Case]:
        """Each deployed path's changes (an embedding's nearest-neighbour changes: failed beyond
        the tie margin, or on any with ``--fail-on tie``) as the task's effect reports them, or
        the effect as one case when it has no per-path changes; the images left out as in
        :meth:`AccuracyReport.cases`."""
        ties_fail = _ties_fail(_fail_on(self.run))
        cases = []
        if self.effect is not None and hasattr(self.effect, "cases"):  # an effect that says its own cases
            cases += self.effect.cases(self.models, ties_fail, f"accuracy.{self.task}")
        elif self.effect is not None:
            names = [s.name for s in self.evaluated]
            paths = self.effect.to_dict(names).get("paths", [])[1:]
            for path, model in zip(paths, self.models):
                if "neighbour_changes" not in path:
                    continue
                changes = [c for c in path.get("changes", []) if ties_fail or c.get("verdict") == "diverged"]
                said = f"{len(changes)} of {len(names)} images' nearest neighbour changed" + (
                    "" if ties_fail else " beyond the tie margin")
                reason = (f"{said} ({path.get('ties') or 0} ties in all): "
                          + ", ".join(str(c["image"]) for c in changes[:10]) if changes else
                          f"no nearest-neighbour change beyond the tie margin ({path.get('ties') or 0} ties)")
                details = "\n".join(f"{c['image']}: {c['verdict']}, reference neighbour {c['reference_neighbour']}, "
                                     f"deployed {c['deployed_neighbour']}" for c in path.get("changes", []))
                cases.append(Case(str(model), f"accuracy.{self.task}", Status.FAILED if changes else Status.PASSED,
                                  reason, details))
            if not cases:
                changed = self.effect.any_changes(ties=ties_fail)
                cases.append(Case("effect", f"accuracy.{self.task}", Status.FAILED if changed else Status.PASSED,
                                  f"the deployed paths {'change' if changed else 'do not change'} the task's effect"))
        issues = [ImageIssue(name, reason, self.outcomes.get(name, "failed")) for name, reason in self.failed.items()]
        cases += issue_cases("accuracy", issues, allow_rejected=_allowed(self.run))
        if not self.evaluated:
            cases.append(Case("images", "accuracy", Status.ERROR,
                              f"none of the {len(self.dataset.samples)} images could be processed on every path"))
        return cases

    def to_dict(self) -> dict:
        """accuracy.json: the task, its metrics per path, the images left out, the context."""
        names = [s.name for s in self.evaluated]
        out = {"task": self.task, "reference": self.reference.to_dict(),
               "deployed": {"pipelines": list(self.paths), "models": list(self.models), "url": self.server.url,
                            "protocol": self.server.protocol},
               "spec": self.spec}
        if self.run is not None:
            out["run"] = {"seconds": self.run.seconds, "batch_size": self.run.batch_size, "fail_on": self.run.fail_on,
                          "allow_rejected": self.run.allow_rejected}
        if self.versions:
            out["versions"] = dict(self.versions)
        labels = [self.dataset.label_name(s) for s in self.evaluated]
        return {**out,
                "dataset": {"source": str(self.dataset.source), "layout": self.dataset.layout,
                            "labeled": self.dataset.labeled, "images": len(self.dataset.samples),
                            "evaluated": len(self.evaluated), "failed": len(self.failed),
                            "rejected": {side: sum(o == f"rejected by {side}" for o in self.outcomes.values())
                                         for side in Side},
                            "labels": sorted({x for x in labels if x is not None}),
                            "skipped": [{"image": s.name, "reason": s.reason} for s in self.dataset.skipped]},
                "effect": self.effect.to_dict(names),
                "failed": [{"image": n, "reason": r, "outcome": self.outcomes.get(n, "failed")}
                           for n, r in self.failed.items()],
                "images": [{"image": n, "label": label} for n, label in zip(names, labels)]}
