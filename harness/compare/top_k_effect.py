"""Classification's effect on a labeled set (``harness accuracy``): each path's scores on the
images every path classified: top-1/top-k accuracy, per-class recall and precision (macro
averages), flips against the reference (ties labelled, as :meth:`TopK.flip` judges them), and
McNemar's exact test. :func:`evaluate` is a pure function of the predictions; :class:`TopKEffect`
is what the classification task's :meth:`~harness.task_api.Task.effect_on` returns (its section
of accuracy.json and accuracy.md, its cases)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from harness.compare.comparators import TOP_K as TOP_K_COMPARATOR
from harness.compare.comparators import TopKTolerance
from harness.compare.paired import McNemar, mcnemar_exact
from harness.names import markdown_code, markdown_text
from harness.outcome import Outcome, outcome_of
from harness.results.interface import Case, Status
from harness.stage import DEFAULT_TOP_K as TOP_K
from harness.verdict import Verdict

# The accuracy job's types, read by their attributes only (this layer imports no job).
Dataset = Sample = Predictions = Any
"""harness.accuracy.dataset's and harness.accuracy.predict's."""

# -- metrics (pure functions of arrays) -----------------------------------------------------

def top_k_accuracy(labels: np.ndarray, top_k: np.ndarray, k: int) -> float:
    """Share of images whose label is among the first k of their [images, >=k] predictions."""
    return float(np.mean(np.any(top_k[:, :k] == labels[:, None], axis=1)))


@dataclass(frozen=True)
class ClassScore:
    index: int
    name: str
    images: int
    recall: float
    precision: float
    """0.0 when the path never predicts the class (scikit-learn's ``zero_division=0``)."""


def class_scores(labels: np.ndarray, top1: np.ndarray, classes: Sequence[str]) -> tuple[ClassScore, ...]:
    """Recall and precision of each class present in ``labels``, by class index."""
    scores = []
    for index in np.unique(labels):
        hits = int(np.sum((top1 == index) & (labels == index)))
        images, predicted = int(np.sum(labels == index)), int(np.sum(top1 == index))
        scores.append(ClassScore(int(index), classes[index], images, hits / images, hits / predicted if predicted else 0.0))
    return tuple(scores)


def flip_count(reference_top1: np.ndarray, deployed_top1: np.ndarray) -> int:
    """Images whose top-1 class differs between the two paths."""
    return int(np.sum(reference_top1 != deployed_top1))


def flip_verdicts(samples: Sequence[Sample], reference: Predictions, deployed: Predictions,
                  tie_margin: float) -> dict[str, tuple[str, float]]:
    """Image name -> ("tie" or "diverged", reference margin in logits), for each image whose
    top-1 class the deployed path changes, as the top-k comparator judges it (:meth:`TopK.flip`:
    the margin is inf where the reference kept no logits, a divergence)."""
    out = {}
    for s in samples:
        ref_top1, dep_top1 = reference.top_k[s.name][0], deployed.top_k[s.name][0]
        if ref_top1 == dep_top1:
            continue
        flip = TOP_K_COMPARATOR.flip(reference.logits.get(s.name), dep_top1, TopKTolerance(tie_margin))
        out[s.name] = (flip.verdict.value, flip.metrics["reference_margin"])
    return out


# -- the evaluation ------------------------------------------------------------------------

@dataclass(frozen=True)
class PathScore:
    """One path's scores on the evaluated images; accuracy fields are None without labels,
    comparison fields None for the reference itself."""

    path: str
    top1: float | None
    topk: float | None
    """Top-k accuracy, k = :attr:`TopKScores.k`."""
    recall: float | None
    """Macro average over the classes present in the dataset."""
    precision: float | None
    """Macro average over the classes present in the dataset."""
    per_class: tuple[ClassScore, ...]
    flips: int | None
    """Every image whose top-1 class differs from the reference's, ties included."""
    flip_rate: float | None
    mcnemar: McNemar | None
    ties: int | None = None
    """Of the flips, those within the tie margin (see :mod:`harness.compare.ties`)."""
    flip_verdicts: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """Flipped image -> ("tie" or "diverged", reference margin in logits)."""

    @property
    def diverged_flips(self) -> int | None:
        return None if self.flips is None else self.flips - (self.ties or 0)


@dataclass(frozen=True)
class TopKScores:
    dataset: Dataset
    scores: tuple[PathScore, ...]
    """The reference first, then the deployed paths."""
    evaluated: tuple[Sample, ...]
    """The images every path classified: the only ones scored, on every path."""
    failed: Mapping[str, str]
    """Image name -> the reasons it failed, per path ("dali: truncated JPEG ..."): every
    image left out, whatever its outcome."""
    predictions: Mapping[str, Mapping[str, tuple[int, ...]]]
    """Path -> image name -> top-k class indices."""
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)
    """Image name -> "failed", "rejected by deployment" or "rejected by training", for each
    image of ``failed`` (see :func:`outcome_of`)."""
    tie_margin: float = 0.0
    k: int = TOP_K
    """Classes per image in ``predictions`` and in top-k accuracy."""

    def rejected(self, side: str) -> int:
        return sum(o == Outcome.rejected_by(side) for o in self.outcomes.values())


def evaluate(dataset: Dataset, predictions: Sequence[Predictions], classes: Sequence[str],
             tie_margin: float = 0.0, k: int = TOP_K) -> TopKScores:
    """Score every path on the images that none failed; ``predictions[0]`` is the reference.
    ``tie_margin`` in logits (the CLI passes the output tolerance; 0.0 here: only an exact
    tie is a tie); ``k``: top-k accuracy (default 5; the predictions hold at least k classes)."""
    reasons: dict[str, list[str]] = {}
    for p in predictions:
        for name, reason in p.failed.items():
            reasons.setdefault(name, []).append(f"{p.path}: {reason}")
    evaluated = tuple(s for s in dataset.samples if s.name not in reasons)
    missing = [s.name for s in evaluated if any(s.name not in p.top_k for p in predictions)]
    if missing:  # every image in is an image reported
        raise RuntimeError(f"{len(missing)} images neither predicted nor failed: {', '.join(missing[:10])}"
                           + (" ..." if len(missing) > 10 else ""))
    failed = {s.name: "; ".join(reasons[s.name]) for s in dataset.samples if s.name in reasons}
    outcomes = {name: outcome_of(name in predictions[0].failed, [name in p.failed for p in predictions[1:]])
                for name in failed}
    top_k = {p.path: _top_k_matrix(p, evaluated, k) for p in predictions}
    labels = np.array([s.label for s in evaluated], dtype=np.int64) if dataset.labeled else None
    reference = predictions[0].path
    scores = []
    for p in predictions:
        top1 = top_k[p.path][:, 0]
        compared = p.path != reference
        flips = flip_count(top_k[reference][:, 0], top1) if compared else None
        verdicts = flip_verdicts(evaluated, predictions[0], p, tie_margin) if compared else {}
        ties = sum(v == Verdict.TIE.value for v, _ in verdicts.values()) if compared else None
        if labels is None or not len(evaluated):
            scores.append(PathScore(p.path, None, None, None, None, (), flips, rate(flips, len(evaluated)), None,
                                    ties, verdicts))
            continue
        per_class = class_scores(labels, top1, classes)
        mcnemar = mcnemar_exact(top_k[reference][:, 0] == labels, top1 == labels) if compared else None
        scores.append(PathScore(
            p.path, top_k_accuracy(labels, top_k[p.path], 1), top_k_accuracy(labels, top_k[p.path], k),
            float(np.mean([c.recall for c in per_class])), float(np.mean([c.precision for c in per_class])),
            per_class, flips, rate(flips, len(evaluated)), mcnemar, ties, verdicts))
    return TopKScores(dataset, tuple(scores), evaluated, failed,
                          {p.path: {s.name: p.top_k[s.name][:k] for s in evaluated} for p in predictions}, outcomes,
                          tie_margin, k)


def _top_k_matrix(predictions: Predictions, samples: Sequence[Sample], k: int) -> np.ndarray:
    """[images, k] class indices, best first (also when no image is left)."""
    rows = [predictions.top_k[s.name][:k] for s in samples]
    return np.array(rows, np.int64) if rows else np.zeros((0, k), np.int64)



# -- the effect: its section of accuracy.json and accuracy.md, its cases --------------------------

FLIPS_SHOWN = 50
"""Images listed in accuracy.md whose top-1 class differs between paths (all are in accuracy.json)."""


@dataclass(frozen=True)
class TopKEffect:
    """Classification's effect on a labeled set: :class:`TopKScores` and the model's class names."""

    scores: TopKScores
    classes: Sequence[str]
    """The model's class names, in output order."""

    @property
    def reference(self) -> PathScore:
        return self.scores.scores[0]

    @property
    def deployed(self) -> tuple[PathScore, ...]:
        return self.scores.scores[1:]

    def any_changes(self, ties: bool = True) -> bool:
        """Does some deployed path change the reference's top-1 class on some image (beyond the
        tie margin unless ``ties``)?"""
        return any(s.flips if ties else s.diverged_flips for s in self.deployed)

    def cases(self, models: Sequence[str], ties_fail: bool, name: str) -> list[Case]:
        """Each deployed path's top-1 changes against the reference: failed beyond the tie margin,
        or on any with ``ties_fail``."""
        result, evaluated = self.scores, len(self.scores.evaluated)
        cases = []
        for s, model in zip(self.deployed, models):
            flipped = [(s.flip_verdicts[x.name], x.name) for x in result.evaluated if x.name in s.flip_verdicts]
            failing = [image for (verdict, _), image in flipped if ties_fail or verdict == "diverged"]
            scores = (f"top-1 {_percent(s.top1)} ({points(s.top1, self.reference.top1):+.2f} points vs the "
                      "reference)" if s.top1 is not None and self.reference.top1 is not None else "")
            if failing:
                what = "change top-1" + ("" if ties_fail else " beyond the tie margin")
                reason = (f"{len(failing)} of {evaluated} images {what} ({s.ties or 0} ties in all): "
                          + ", ".join(failing[:10]) + (", ..." if len(failing) > 10 else ""))
            else:
                reason = f"no top-1 change beyond the tie margin on {evaluated} images ({s.ties or 0} ties)"
            details = "\n".join(f"{image}: {verdict}, reference margin {margin:.4g}"
                                for (verdict, margin), image in flipped)
            cases.append(Case(str(model), "accuracy.top-1", Status.FAILED if failing else Status.PASSED,
                              "; ".join(x for x in (reason, scores) if x), details))
        return cases

    def to_dict(self, names: Sequence[str]) -> dict:
        """The scores per path and every evaluated image's predictions (``names``: their order);
        the tie margin and k are the run's (accuracy.json's ``run``)."""
        result, k = self.scores, self.scores.k
        return {
            "paths": [self._path_dict(s) for s in result.scores],
            "images": [{"image": name,
                        "top1": {path: self.classes[top[name][0]] for path, top in result.predictions.items()},
                        f"top{k}": {path: list(top[name]) for path, top in result.predictions.items()},
                        "flips": {score.path: {"verdict": score.flip_verdicts[name][0],
                                               "margin": _finite(score.flip_verdicts[name][1])}
                                  for score in result.scores if name in score.flip_verdicts}}
                       for name in names],
        }

    def _path_dict(self, s: PathScore) -> dict:
        k, reference = self.scores.k, self.reference
        entry = {"path": s.path, "ensemble": ensemble(s.path), "top1": s.top1, f"top{k}": s.topk,
                 "recall_macro": s.recall, "precision_macro": s.precision}
        if s is not reference:
            entry["diff_points"] = {key: points(value, base) for key, value, base in compared_scores(s, reference, k)}
            entry["flips"], entry["flip_rate"] = s.flips, s.flip_rate
            entry["ties"], entry["diverged_flips"] = s.ties, s.diverged_flips
            entry["flip_rate_without_ties"] = rate(s.diverged_flips, len(self.scores.evaluated))
            entry["mcnemar"] = ({"b": s.mcnemar.b, "c": s.mcnemar.c, "p_value": s.mcnemar.p_value}
                                if s.mcnemar else None)
        entry["per_class"] = [{"index": c.index, "class": c.name, "images": c.images, "recall": c.recall,
                               "precision": c.precision} for c in s.per_class]
        return entry

    def markdown(self, names: Sequence[str]) -> list[str]:
        """The consistency table, per-class scores and the images whose top-1 changed."""
        result, k, reference = self.scores, self.scores.k, self.reference
        evaluated = len(result.evaluated)
        columns = ("path", "top-1", "diff", f"top-{k}", "diff", "recall (macro)", "diff", "precision (macro)", "diff",
                   "flip rate vs reference", "without ties", "McNemar b/c, p")
        lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
        for s in result.scores:
            cells = [_path_name(s.path) if s is reference else f"`{ensemble(s.path)}`"]
            for _, value, base in compared_scores(s, reference, k):
                cells += [_cell(value), "" if s is reference else _signed(points(value, base))]
            if s is reference:
                cells += ["", "", ""]
            else:
                cells.append("-" if s.flip_rate is None else f"{_cell(s.flip_rate)} ({s.flips}/{evaluated})")
                without = rate(s.diverged_flips, evaluated)
                cells.append("-" if without is None else
                             f"{_cell(without)} ({s.diverged_flips}/{evaluated}; "
                             f"{s.ties} {'tie' if s.ties == 1 else 'ties'})")
                m = s.mcnemar
                cells.append("-" if m is None else f"{m.b}/{m.c}, p = {m.p_value:.3g}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            "Diffs are deployed minus reference, in points. Flip rate: the share of images whose top-1 class differs "
            "from the reference's; without ties, the changes that are not ties (a tie: the reference's top-1 logit was "
            f"ahead of the deployed top-1 by at most {result.tie_margin:g}, what the output's error explains). "
            "McNemar: b = images the reference classifies correctly and the deployed path "
            "does not, c = the reverse; p = exact two-sided binomial test of b against b + c at 1/2 "
            "(p = 1 when b + c = 0). Macro averages are over the classes present in the dataset; a class a path never "
            "predicts has precision 0.",
        ]
        return lines + self._per_class() + self._flipped()

    def _per_class(self) -> list[str]:
        result = self.scores
        if not result.dataset.labeled or not result.scores[0].per_class:
            return []
        lines = ["", "## Per class (recall / precision)", "",
                 "| class | images | " + " | ".join(_path_name(s.path) for s in result.scores) + " |",
                 "|---|---:|" + "---:|" * len(result.scores)]
        per_class = [{c.name: c for c in s.per_class} for s in result.scores]
        for c in result.scores[0].per_class:
            cells = [f"{_cell(scores[c.name].recall)} / {_cell(scores[c.name].precision)}" for scores in per_class]
            lines.append(f"| {c.name} ({c.index}) | {c.images} | " + " | ".join(cells) + " |")
        return lines

    def _flipped(self) -> list[str]:
        result = self.scores
        flipped = [s for s in result.evaluated if len({top[s.name][0] for top in result.predictions.values()}) > 1]
        if not flipped:
            return []
        lines = ["", f"## Images whose top-1 class differs between paths ({len(flipped)})", "",
                 "A deployed top-1 marked *tie* is within the tie margin of the reference's (margin in logits); "
                 "*diverged* is beyond it.", "",
                 "| image | label | " + " | ".join(_path_name(s.path) for s in result.scores) + " |",
                 "|---|---|" + "---|" * len(result.scores)]
        for sample in flipped[:FLIPS_SHOWN]:
            cells = [self._flip_cell(sample, score) for score in result.scores]
            label = None if sample.label is None else self.classes[sample.label]
            lines.append(f"| {markdown_code(sample.name)} | {markdown_text(label or '-')} | " + " | ".join(cells) + " |")
        if len(flipped) > FLIPS_SHOWN:
            lines.append(f"\n{len(flipped) - FLIPS_SHOWN} more in accuracy.json.")
        return lines

    def _flip_cell(self, sample: Sample, score: PathScore) -> str:
        top1 = self.classes[self.scores.predictions[score.path][sample.name][0]]
        flip = score.flip_verdicts.get(sample.name)
        if flip is None:
            return top1
        verdict, margin = flip
        return f"{top1} ({verdict}, margin {margin:.3g})" if math.isfinite(margin) else f"{top1} ({verdict}, margin inf)"


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


def _path_name(path: str) -> str:
    return "reference" if path == "reference" else str(ensemble(path))


def rate(count: int | None, total: int) -> float | None:
    return count / total if count is not None and total else None


def points(value: float | None, reference: float | None) -> float | None:
    return None if value is None or reference is None else round(100 * (value - reference), 6)


def _finite(value: float) -> float | None:
    """None for inf (strict JSON)."""
    return value if math.isfinite(value) else None


def _percent(value: float) -> str:
    return f"{100 * value:.2f}%"


def _cell(value: float | None) -> str:
    return "-" if value is None else _percent(value)


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"
