"""``harness accuracy``'s report type: :class:`AccuracyReport`, the scores and what produced
them; accuracy.json is its ``to_dict``. The writer (accuracy.md, the files) is
:mod:`harness.accuracy.report`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from harness.client import PIPELINES
from harness.outcome import Side
from harness.results.sides import ReferenceInfo, ServerInfo, Versions

if TYPE_CHECKING:
    from harness.accuracy.dataset import Dataset, Sample
    from harness.accuracy.scoring import AccuracyResult, PathScore


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
                        "classes": sorted({self.label_name(s) for s in result.dataset.samples if s.label is not None})},
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


def compared_scores(s: PathScore, reference: PathScore, k: int) -> list[tuple[str, float | None, float | None]]:
    """(JSON key, this path's value, the reference's) of each score compared in points."""
    return [("top1", s.top1, reference.top1), (f"top{k}", s.topk, reference.topk),
            ("recall_macro", s.recall, reference.recall), ("precision_macro", s.precision, reference.precision)]


def ensemble(path: str) -> str | None:
    """The model a deployed path is served by: a pipeline's ensemble, or the model named (None for the reference)."""
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

    def any_rejected(self) -> bool:
        return any(o == side_outcome for o in self.outcomes.values() for side_outcome in
                   (f"rejected by {side}" for side in Side))

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
                            "labels": sorted({x for x in labels if x is not None})},
                "effect": self.effect.to_dict(names),
                "failed": [{"image": n, "reason": r, "outcome": self.outcomes.get(n, "failed")}
                           for n, r in self.failed.items()],
                "images": [{"image": n, "label": label} for n, label in zip(names, labels)]}
