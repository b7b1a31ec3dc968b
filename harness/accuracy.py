"""``harness accuracy``: does the deployed preprocessing change what the model predicts?

On a labeled image set, the reference path (the training recipe and the reference model,
in-process) and each deployed ensemble (``classify_dali``, ``classify_opencv``, through
the server) classify every image. Per path: top-1 and top-5 accuracy, per-class recall and
precision with macro averages over the classes present in the dataset; per deployed path:
the prediction flip rate against the reference (share of images whose top-1 class
differs; needs no labels) and McNemar's exact test on the images one path gets right and
the other wrong.

Datasets: an ImageFolder layout (one sub-directory per class, named by a class name from
the model's ``labels.txt`` or a class index), a CSV of ``file,label`` (paths relative to
the CSV), or a flat directory of unlabeled images (flip rates only).

Nothing is dropped silently: an image that fails on any path (unreadable, not an image,
rejected by the server) is listed with its reasons and excluded from every path alike, so
all paths are scored on the same images. An image one side rejects while the other
classifies it is labelled ``rejected by deployment`` or ``rejected by training``: the
model cannot serve an image it was trained on (or the reverse), a divergence of its own.

A top-1 change is a **tie** when the reference's margin between its top-1 logit and its
logit for the deployed top-1 is within ``tie_margin`` (default: the output tolerance; see
:mod:`harness.compare.ties`); flip rates are given with and without ties. Accuracy,
McNemar and flip counts stay on all evaluated images: ties are labelled, never dropped.
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from harness.client import PIPELINES, ServerUnavailable, TritonClient
from harness.compare.result import SIDES, one_line
from harness.compare.ties import margin_verdict, reference_margin
from harness.compare.tolerance import Verdict
from harness.corpus import list_images
from harness.reference import Recipe
from harness.reference.model import ReferenceModel

REFERENCE = "reference"
"""Name of the reference path in results (deployed paths are named by pipeline: dali, opencv)."""
TOP_K = 5
JSON_FILENAME = "accuracy.json"
MARKDOWN_FILENAME = "accuracy.md"
CSV_HEADER_FILE = ("file", "path", "image", "filename")
CSV_HEADER_LABEL = ("label", "class")


class DatasetError(ValueError):
    """The dataset cannot be read: the message names the file, directory or label at fault."""


# -- the dataset ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    name: str
    """How the image is reported: its path relative to the dataset (or as the CSV gives it)."""
    path: Path
    label: int | None
    """Class index; None in an unlabeled dataset."""


@dataclass(frozen=True)
class Dataset:
    source: Path
    layout: str
    """"imagefolder", "csv" or "unlabeled"."""
    samples: tuple[Sample, ...]

    @property
    def labeled(self) -> bool:
        return self.layout != "unlabeled"


def load_dataset(dataset: Path, classes: Sequence[str], labels_csv: Path | None = None) -> Dataset:
    """Read a dataset whose labels are names from ``classes`` (the model's labels, in output
    order) or class indices.

    ``dataset`` is a CSV file of ``file,label`` rows, or a directory: with ``labels_csv``
    its images are labeled by that CSV (every image of the directory needs a row); with
    class sub-directories it is an ImageFolder layout; with only files it is unlabeled.
    Raises :class:`DatasetError` naming every unknown label, or an image without one."""
    if not dataset.exists():
        raise DatasetError(f"dataset not found: {dataset}")
    if dataset.is_file():
        if labels_csv is not None:
            raise DatasetError(f"{dataset} is a file: give a CSV dataset either as DATASET or with --labels, not both")
        return Dataset(dataset, "csv", _read_csv(dataset, classes))
    if labels_csv is not None:
        samples = _read_csv(labels_csv, classes)
        labeled = {s.path.resolve() for s in samples}
        unlabeled = [p.name for p in list_images(dataset) if p.resolve() not in labeled]
        if unlabeled:
            raise DatasetError(f"{len(unlabeled)} image(s) of {dataset} have no row in {labels_csv}: {_some(unlabeled)}")
        return Dataset(dataset, "csv", samples)
    class_dirs = sorted(p for p in dataset.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not class_dirs:
        images = list_images(dataset)
        if not images:
            raise DatasetError(f"no images in {dataset}")
        return Dataset(dataset, "unlabeled", tuple(Sample(p.name, p, None) for p in images))
    return Dataset(dataset, "imagefolder", _read_image_folder(dataset, class_dirs, classes))


def _read_image_folder(root: Path, class_dirs: list[Path], classes: Sequence[str]) -> tuple[Sample, ...]:
    loose = [p.name for p in list_images(root)]
    if loose:  # an ImageFolder reader would skip them: say so instead
        raise DatasetError(f"{root} has class directories and also files outside them: {_some(loose)}; "
                           "in an ImageFolder layout every image is inside its class's directory")
    nested = [f"{d.name}/{p.name}" for d in class_dirs for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if nested:
        raise DatasetError(f"class directories of {root} hold sub-directories: {_some(nested)}; "
                           "an ImageFolder layout is one level of class directories")
    indices = class_indices({d.name: f"directory {d.name!r}" for d in class_dirs}, classes, str(root))
    samples = [Sample(f"{d.name}/{p.name}", p, indices[d.name]) for d in class_dirs for p in list_images(d)]
    if not samples:
        raise DatasetError(f"no images in the class directories of {root}")
    return tuple(samples)


def _read_csv(path: Path, classes: Sequence[str]) -> tuple[Sample, ...]:
    if not path.is_file():
        raise DatasetError(f"label file not found: {path}")
    rows: list[tuple[int, str, str]] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        for row in reader:
            line_number = reader.line_num
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue
            if len(cells) != 2 or not all(cells):
                raise DatasetError(f"{path}, line {line_number}: expected two columns file,label, got {row}")
            if not rows and cells[0].lower() in CSV_HEADER_FILE and cells[1].lower() in CSV_HEADER_LABEL:
                continue  # a header row
            rows.append((line_number, *cells))
    if not rows:
        raise DatasetError(f"{path}: no file,label rows")
    first_line: dict[str, int] = {}
    for line_number, file, _ in rows:
        if file in first_line:
            raise DatasetError(f"{path}, line {line_number}: {file!r} is already listed on line {first_line[file]}")
        first_line[file] = line_number
    # Each label is named by the first line it appears on (later lines overwrite earlier ones in a dict).
    indices = class_indices({label: f"line {n}" for n, _, label in reversed(rows)}, classes, str(path))
    # A row whose file is missing stays in: it becomes a failed image with the reason.
    return tuple(Sample(file, path.parent / file, indices[label]) for _, file, label in rows)


def class_indices(labels: Mapping[str, str], classes: Sequence[str], source: str) -> dict[str, int]:
    """Label (class name or index) -> class index, for labels given as {label: where it was
    found}. Raises :class:`DatasetError` listing every label that names no single class."""
    by_name: dict[str, list[int]] = {}
    for index, name in enumerate(classes):
        by_name.setdefault(name, []).append(index)
    indices, problems = {}, []
    for label, where in labels.items():
        if label.isdigit() and int(label) < len(classes):
            indices[label] = int(label)
        elif len(by_name.get(label, ())) == 1:
            indices[label] = by_name[label][0]
        elif label in by_name:
            problems.append(f"{label!r} ({where}) names {len(by_name[label])} classes "
                            f"(indices {', '.join(map(str, by_name[label]))}): use the index")
        else:
            close = difflib.get_close_matches(label, list(by_name), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{label!r} ({where}) is not a known class{hint}")
    if problems:
        raise DatasetError(f"{source}: {'; '.join(problems)}. A label is a class name "
                           f"from the model's labels.txt or a class index 0-{len(classes) - 1}")
    return indices


def _some(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# -- predictions ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Predictions:
    """What one path predicted for each image, and why it could not for others."""

    path: str
    top_k: Mapping[str, tuple[int, ...]]
    """Image name -> the top-5 class indices, best first."""
    failed: Mapping[str, str]
    """Image name -> reason."""
    logits: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Image name -> logits, kept for the reference only (the tie margins need them; 4 KB
    an image for 1000 classes). Without them every top-1 change counts as diverged."""


def top_k_classes(logits: np.ndarray, k: int = TOP_K) -> list[tuple[int, ...]]:
    """[batch, classes] logits -> the k best class indices of each row, best first."""
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return [tuple(int(i) for i in row) for row in order]


def _batches(samples: Sequence[Sample], size: int):
    for start in range(0, len(samples), size):
        yield samples[start:start + size]


def _read(sample: Sample) -> bytes:
    return sample.path.read_bytes()


def predict_reference(samples: Sequence[Sample], recipe: Recipe, model: ReferenceModel, batch_size: int = 16,
                      on_image: Callable[[str], None] = lambda name: None) -> Predictions:
    """The training side in-process: the recipe's ``input`` stage, then the reference model,
    ``batch_size`` images at a time (default 16). Whatever goes wrong with one image (any
    decoder's error, a pixel limit, memory, a custom recipe's wrong shape) fails that image
    alone, with a one-line reason."""
    top_k, failed, logits = {}, {}, {}
    for batch in _batches(samples, batch_size):
        names, inputs = [], []
        for sample in batch:
            try:
                model_input = recipe(_read(sample))["input"]
                if model.input_shape and tuple(model_input.shape) != tuple(model.input_shape):
                    raise ValueError(f"reference {recipe.name} made a {list(model_input.shape)} model input; "
                                     f"the classifier takes {list(model.input_shape)}")
                inputs.append(model_input)
                names.append(sample.name)
            except Exception as exc:
                failed[sample.name] = _reason(exc)
        if inputs:
            batch_logits = model.logits(np.stack(inputs))
            top_k.update(zip(names, top_k_classes(batch_logits)))
            logits.update(zip(names, batch_logits.astype(np.float32)))
        for sample in batch:
            on_image(sample.name)
    return Predictions(REFERENCE, top_k, failed, logits)


def predict_deployed(samples: Sequence[Sample], client: TritonClient, pipeline: str, batch_size: int = 8,
                     on_image: Callable[[str], None] = lambda name: None) -> Predictions:
    """One deployed ensemble through the server, ``batch_size`` images a request (default 8).
    A request the server rejects is sent again one image at a time, so a bad image fails
    alone; :class:`harness.client.ServerUnavailable` (no answer at all) propagates."""
    top_k, failed = {}, {}
    for batch in _batches(samples, batch_size):
        readable = {}
        for sample in batch:
            try:
                readable[sample.name] = _read(sample)
            except OSError as exc:
                failed[sample.name] = _reason(exc)
        try:
            if readable:
                top_k.update(zip(readable, top_k_classes(client.logits(list(readable.values()), pipeline))))
        except ServerUnavailable:
            raise
        except Exception:  # one bad image fails the whole request: find it
            for name, data in readable.items():
                try:
                    top_k[name] = top_k_classes(client.logits([data], pipeline))[0]
                except ServerUnavailable:
                    raise
                except Exception as exc:
                    # The path is named beside the reason already: drop Triton's "in ensemble 'classify_dali', ".
                    failed[name] = re.sub(r"^in ensemble '[^']*', ", "", one_line(exc))
        for sample in batch:
            on_image(sample.name)
    return Predictions(pipeline, top_k, failed)


def _reason(exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {exc.filename}"
    if isinstance(exc, OSError):
        return f"unreadable: {exc.strerror or exc}"
    return one_line(exc)


# -- metrics (pure functions of arrays) -----------------------------------------------------

@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on the images exactly one of two paths classifies correctly."""

    b: int
    """Images the reference gets right and the deployed path wrong."""
    c: int
    """Images the reference gets wrong and the deployed path right."""
    p_value: float
    """Two-sided exact binomial test of b against b + c trials at 1/2; 1.0 when b + c = 0."""


def mcnemar_exact(reference_correct: np.ndarray, deployed_correct: np.ndarray) -> McNemar:
    from scipy.stats import binomtest

    b = int(np.sum(reference_correct & ~deployed_correct))
    c = int(np.sum(~reference_correct & deployed_correct))
    p = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
    return McNemar(b, c, float(min(1.0, p)))


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
    top-1 class the deployed path changes. The margin is inf where the reference kept no
    logits (then the change is a divergence)."""
    out = {}
    for s in samples:
        ref_top1, dep_top1 = reference.top_k[s.name][0], deployed.top_k[s.name][0]
        if ref_top1 == dep_top1:
            continue
        logits = reference.logits.get(s.name)
        margin = reference_margin(logits, dep_top1) if logits is not None else math.inf
        out[s.name] = (margin_verdict(margin, tie_margin).value, margin)
    return out


def outcome_of(reference_failed: bool, deployed_failed: Sequence[bool]) -> str:
    """How an image that failed somewhere is labelled: "rejected by deployment" when the
    reference classified it and some deployed path did not; "rejected by training" when the
    reference failed and some deployed path classified it; else "failed"."""
    if not reference_failed:
        return f"rejected by {SIDES[0]}"
    return f"rejected by {SIDES[1]}" if not all(deployed_failed) else "failed"


# -- the evaluation ------------------------------------------------------------------------

@dataclass(frozen=True)
class PathScore:
    """One path's scores on the evaluated images; accuracy fields are None without labels,
    comparison fields None for the reference itself."""

    path: str
    top1: float | None
    top5: float | None
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
class AccuracyResult:
    dataset: Dataset
    scores: tuple[PathScore, ...]
    """The reference first, then the deployed paths."""
    evaluated: tuple[Sample, ...]
    """The images every path classified: the only ones scored, on every path."""
    failed: Mapping[str, str]
    """Image name -> the reasons it failed, per path ("dali: truncated JPEG ..."): every
    image left out, whatever its outcome."""
    predictions: Mapping[str, Mapping[str, tuple[int, ...]]]
    """Path -> image name -> top-5 class indices."""
    outcomes: Mapping[str, str] = field(default_factory=dict)
    """Image name -> "failed", "rejected by deployment" or "rejected by training", for each
    image of ``failed`` (see :func:`outcome_of`)."""
    tie_margin: float = 0.0

    def rejected(self, side: str) -> int:
        return sum(o == f"rejected by {side}" for o in self.outcomes.values())


def evaluate(dataset: Dataset, predictions: Sequence[Predictions], classes: Sequence[str],
             tie_margin: float = 0.0) -> AccuracyResult:
    """Score every path on the images that none failed; ``predictions[0]`` is the reference.
    ``tie_margin`` in logits (the CLI passes the output tolerance; 0.0 here: only an exact
    tie is a tie)."""
    reasons: dict[str, list[str]] = {}
    for p in predictions:
        for name, reason in p.failed.items():
            reasons.setdefault(name, []).append(f"{p.path}: {reason}")
    evaluated = tuple(s for s in dataset.samples if s.name not in reasons)
    missing = [s.name for s in evaluated if any(s.name not in p.top_k for p in predictions)]
    if missing:  # every image in is an image reported
        raise RuntimeError(f"{len(missing)} images neither predicted nor failed: {_some(missing)}")
    failed = {s.name: "; ".join(reasons[s.name]) for s in dataset.samples if s.name in reasons}
    outcomes = {name: outcome_of(name in predictions[0].failed, [name in p.failed for p in predictions[1:]])
                for name in failed}
    top_k = {p.path: _top_k_matrix(p, evaluated) for p in predictions}
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
            scores.append(PathScore(p.path, None, None, None, None, (), flips, _rate(flips, len(evaluated)), None,
                                    ties, verdicts))
            continue
        per_class = class_scores(labels, top1, classes)
        mcnemar = mcnemar_exact(top_k[reference][:, 0] == labels, top1 == labels) if compared else None
        scores.append(PathScore(
            p.path, top_k_accuracy(labels, top_k[p.path], 1), top_k_accuracy(labels, top_k[p.path], TOP_K),
            float(np.mean([c.recall for c in per_class])), float(np.mean([c.precision for c in per_class])),
            per_class, flips, _rate(flips, len(evaluated)), mcnemar, ties, verdicts))
    return AccuracyResult(dataset, tuple(scores), evaluated, failed,
                          {p.path: {s.name: p.top_k[s.name] for s in evaluated} for p in predictions}, outcomes,
                          tie_margin)


def _top_k_matrix(predictions: Predictions, samples: Sequence[Sample]) -> np.ndarray:
    """[images, k] class indices, best first (k = TOP_K, also when no image is left)."""
    rows = [predictions.top_k[s.name] for s in samples]
    return np.array(rows, np.int64) if rows else np.zeros((0, TOP_K), np.int64)


def _rate(count: int | None, total: int) -> float | None:
    return count / total if count is not None and total else None


# -- the report ----------------------------------------------------------------------------

def report_dict(result: AccuracyResult, classes: Sequence[str], context: Mapping) -> dict:
    """accuracy.json: the scores, every image's predictions, the failed images, and
    ``context`` (reference, deployed, spec, versions)."""
    paths = []
    reference = result.scores[0]
    for s in result.scores:
        entry = {
            "path": s.path,
            "ensemble": PIPELINES[s.path].ensemble if s.path in PIPELINES else None,
            "top1": s.top1, "top5": s.top5, "recall_macro": s.recall, "precision_macro": s.precision,
        }
        if s is not reference:
            entry["diff_points"] = {key: _points(entry[key], getattr(reference, attr))
                                    for key, attr in (("top1", "top1"), ("top5", "top5"),
                                                      ("recall_macro", "recall"), ("precision_macro", "precision"))}
            entry["flips"], entry["flip_rate"] = s.flips, s.flip_rate
            entry["ties"], entry["diverged_flips"] = s.ties, s.diverged_flips
            entry["flip_rate_without_ties"] = _rate(s.diverged_flips, len(result.evaluated))
            entry["mcnemar"] = ({"b": s.mcnemar.b, "c": s.mcnemar.c, "p_value": s.mcnemar.p_value}
                                if s.mcnemar else None)
        entry["per_class"] = [{"index": c.index, "class": c.name, "images": c.images, "recall": c.recall,
                               "precision": c.precision} for c in s.per_class]
        paths.append(entry)

    def label_name(sample: Sample):
        return None if sample.label is None else classes[sample.label]

    return {
        **context,
        "dataset": {"source": str(result.dataset.source), "layout": result.dataset.layout,
                    "labeled": result.dataset.labeled, "images": len(result.dataset.samples),
                    "evaluated": len(result.evaluated), "failed": len(result.failed),
                    "rejected": {side: result.rejected(side) for side in SIDES},
                    "classes": sorted({label_name(s) for s in result.dataset.samples if s.label is not None})},
        "paths": paths,
        "tie_margin": result.tie_margin,
        "failed": [{"image": name, "reason": reason, "outcome": result.outcomes.get(name, "failed")}
                   for name, reason in result.failed.items()],
        "images": [{"image": s.name, "label": label_name(s),
                    "top1": {path: classes[top[s.name][0]] for path, top in result.predictions.items()},
                    "top5": {path: list(top[s.name]) for path, top in result.predictions.items()},
                    "flips": {score.path: {"verdict": score.flip_verdicts[s.name][0],
                                           "margin": _finite(score.flip_verdicts[s.name][1])}
                              for score in result.scores if s.name in score.flip_verdicts}}
                   for s in result.evaluated],
    }


def _finite(value: float) -> float | None:
    """None for inf (strict JSON)."""
    return value if math.isfinite(value) else None


def _points(value: float | None, reference: float | None) -> float | None:
    return None if value is None or reference is None else round(100 * (value - reference), 6)


TABLE_COLUMNS = ("path", "top-1", "diff", "top-5", "diff", "recall (macro)", "diff", "precision (macro)", "diff",
                 "flip rate vs reference", "without ties", "McNemar b/c, p")
FLIPS_SHOWN = 50


def render_markdown(report: Mapping) -> str:
    """accuracy.md, from the report dict: the consistency table, per-class scores, the
    images whose top-1 changed, and the failed images."""
    data, paths = report["dataset"], report["paths"]
    reference = paths[0]
    layout = {"imagefolder": "ImageFolder", "csv": "CSV", "unlabeled": "unlabeled: flip rates only"}[data["layout"]]
    lines = [
        "# Accuracy: the deployed preprocessing vs the training reference", "",
        f"- Dataset: `{data['source']}` ({layout}; {data['images']} images"
        + (f", {len(data['classes'])} classes" if data["labeled"] else "") + ")",
        f"- Evaluated: {data['evaluated']} images on every path; {data['failed']} left out of every path"
        + "".join(f", {n} of them rejected by {side} only" for side, n in data.get("rejected", {}).items() if n)
        + (" (listed below)" if data["failed"] else ""),
        f"- Reference: {report['reference']['recipe']}; model: {report['reference']['model']}",
        f"- Deployed: {', '.join('`' + p['ensemble'] + '`' for p in paths[1:])} over "
        f"{report['deployed']['protocol']} at {report['deployed']['url']}",
        f"- Spec: `{report['spec']}`", "",
        "| " + " | ".join(TABLE_COLUMNS) + " |",
        "|---|" + "---:|" * (len(TABLE_COLUMNS) - 1),
    ]
    for p in paths:
        name = f"reference ({report['reference']['recipe_name']})" if p is reference else f"`{p['ensemble']}`"
        cells = [name]
        for key in ("top1", "top5", "recall_macro", "precision_macro"):
            cells += [_percent(p[key]), "" if p is reference else _signed(p["diff_points"][key])]
        if p is reference:
            cells += ["", "", ""]
        else:
            cells.append("-" if p["flip_rate"] is None else f"{_percent(p['flip_rate'])} ({p['flips']}/{data['evaluated']})")
            cells.append("-" if p["flip_rate_without_ties"] is None else
                         f"{_percent(p['flip_rate_without_ties'])} ({p['diverged_flips']}/{data['evaluated']}; "
                         f"{p['ties']} {'tie' if p['ties'] == 1 else 'ties'})")
            m = p["mcnemar"]
            cells.append("-" if m is None else f"{m['b']}/{m['c']}, p = {m['p_value']:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Diffs are deployed minus reference, in points. Flip rate: the share of images whose top-1 class differs "
        "from the reference's; without ties, the changes that are not ties (a tie: the reference's top-1 logit was "
        f"ahead of the deployed top-1 by at most {report.get('tie_margin', 0):g}, what the output's error explains). "
        "McNemar: b = images the reference classifies correctly and the deployed path "
        "does not, c = the reverse; p = exact two-sided binomial test of b against b + c at 1/2 "
        "(p = 1 when b + c = 0). Macro averages are over the classes present in the dataset; a class a path never "
        "predicts has precision 0.",
    ]
    if data["labeled"] and paths[0]["per_class"]:
        lines += ["", "## Per class (recall / precision)", "",
                  "| class | images | " + " | ".join(_path_name(p) for p in paths) + " |",
                  "|---|---:|" + "---:|" * len(paths)]
        per_class = [{c["class"]: c for c in p["per_class"]} for p in paths]
        for c in paths[0]["per_class"]:
            cells = [f"{_percent(scores[c['class']]['recall'])} / {_percent(scores[c['class']]['precision'])}"
                     for scores in per_class]
            lines.append(f"| {c['class']} ({c['index']}) | {c['images']} | " + " | ".join(cells) + " |")
    flipped = [i for i in report["images"] if len(set(i["top1"].values())) > 1]
    if flipped:
        lines += ["", f"## Images whose top-1 class differs between paths ({len(flipped)})", "",
                  "A deployed top-1 marked *tie* is within the tie margin of the reference's (margin in logits); "
                  "*diverged* is beyond it.", "",
                  "| image | label | " + " | ".join(_path_name(p) for p in paths) + " |",
                  "|---|---|" + "---|" * len(paths)]
        for i in flipped[:FLIPS_SHOWN]:
            lines.append(f"| {i['image']} | {i['label'] or '-'} | "
                         + " | ".join(_flip_cell(i, p["path"]) for p in paths) + " |")
        if len(flipped) > FLIPS_SHOWN:
            lines.append(f"\n{len(flipped) - FLIPS_SHOWN} more in {JSON_FILENAME}.")
    if report["failed"]:
        lines += ["", f"## Failed images, excluded from every path ({len(report['failed'])})", "",
                  "| image | outcome | reason |", "|---|---|---|"]
        lines += [f"| {f['image']} | {f.get('outcome', 'failed')} | {' '.join(f['reason'].split())} |"
                  for f in report["failed"]]
    return "\n".join(lines) + "\n"


def _flip_cell(image: Mapping, path: str) -> str:
    flip = image.get("flips", {}).get(path)
    if flip is None:
        return image["top1"][path]
    margin = "inf" if flip["margin"] is None else f"{flip['margin']:.3g}"
    return f"{image['top1'][path]} ({flip['verdict']}, margin {margin})"


def _path_name(p: Mapping) -> str:
    return REFERENCE if p["path"] == REFERENCE else p["ensemble"]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _signed(points: float | None) -> str:
    return "-" if points is None else f"{points:+.2f}"


def write_report(out_dir: Path, report: Mapping) -> tuple[Path, Path]:
    """Write accuracy.json and accuracy.md into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = out_dir / JSON_FILENAME, out_dir / MARKDOWN_FILENAME
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    markdown_path.write_text(render_markdown(report))
    return json_path, markdown_path


def any_flips(report: Mapping, ties: bool = True) -> bool:
    """Does some deployed path change the reference's top-1 class on some image (beyond
    the tie margin unless ``ties``)?"""
    return any(p.get("flips" if ties else "diverged_flips") for p in report["paths"][1:])


def any_rejected(report: Mapping) -> bool:
    """Did one side alone reject some image?"""
    return any(report["dataset"].get("rejected", {}).values())


__all__ = ["DatasetError", "Dataset", "Sample", "load_dataset", "class_indices", "Predictions", "predict_reference",
           "predict_deployed", "top_k_classes", "McNemar", "mcnemar_exact", "top_k_accuracy", "ClassScore",
           "class_scores", "flip_count", "flip_verdicts", "outcome_of", "any_rejected",
           "PathScore", "AccuracyResult", "evaluate", "report_dict", "render_markdown",
           "write_report", "any_flips"]
