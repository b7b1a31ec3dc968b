"""Embeddings: a feature vector out, the L2-normalized vector as the result, a nearest-neighbour
change as the event, retrieval as the effect on a labeled set.

- **Output**: one FP32 ``[features]`` output (of several, the one named like an embedding);
  compared as a tensor by :data:`OUTPUT_TOLERANCE`.
- **Result** (``postprocess``): the vector divided by its L2 norm, compared by cosine
  similarity and by the normalized vectors' error; ``close`` down to a cosine of
  :data:`MIN_COSINE`. A zero vector has no direction: the image diverges, named so.
- **Events**: the images whose nearest neighbour among the run's other images changes
  (reference embeddings against reference embeddings, deployed against deployed). A change
  the reference itself barely prefers (its similarity to its own neighbour ahead of its
  similarity to the deployed side's by at most the margin, :data:`SIMILARITY_MARGIN` by
  default) is a **tie**: listed, not a divergence.
- **Effect** (``harness accuracy --task embedding``): retrieval by label, leave-one-out over
  the images every path embedded: recall@1 and @5 (a query is a hit when one of its k
  nearest images has its label; queries whose label no other image has are not counted),
  the top-5 neighbour overlap and the nearest-neighbour changes against the reference, and
  McNemar's exact test on the recall@1 hits (:mod:`harness.compare.paired`).
- **Diagnose** counts, under each setting, the images whose nearest deployed neighbour
  changes when the query is the reference's embedding instead of the deployment's: each
  image is judged against the fixed deployed gallery, so the search can score images one by one.

The defaults were measured on the 65 corpus photos, EfficientNet-Lite0's 1280 pooled
features, the aligned spec (DALI's resize differs from OpenCV's by one level on some pixels)
against the planted resize-filter spec (docs/tasks.md): per image, at most 1.4% of the features
moved by more than 0.1 and none by more than 0.25, a mean error of at most 0.0098 (planted:
up to 34% beyond 0.1, a mean of up to 0.11); cosine at least 0.99845 (planted: 61 of 65
images under 0.995); no pair's similarity moved by more than 0.0103; one neighbour changed,
by a reference margin of 0.0015 (planted: five, margins 0.012 to 0.028).
"""

from __future__ import annotations

import base64
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from harness.client import TaskModels
from harness.compare.comparators import ARRAYS
from harness.compare.paired import McNemar, mcnemar_exact
from harness.errors import ServerStopped
from harness.formatting import fmt
from harness.listing import InputFile, read_input
from harness.model import ONNX_FILENAME, check_embedder_onnx, export_embedder
from harness.names import identifier, terminal_text
from harness.packing import pack_images
from harness.results.interface import Case, Status
from harness.scores import EMBEDDING
from harness.stage import Stage
from harness.task.classification import describe, vector_outputs
from harness.task_api import Comparator, Comparison, Event, Events, OutputChoice, Section, Task
from harness.task_api.models import ONNX_ON_CPU, ShippedModel
from harness.tolerance import Tolerance
from harness.verdict import Verdict

OUTPUT_TOLERANCE = Tolerance(atol=0.25, max_fraction=0.01, mean_atol=0.02)
"""The raw features: at most 1% beyond 0.25 and a mean error within 0.02, about twice what
the aligned spec's one-level resize differences give (module doc)."""
MIN_COSINE = 0.995
"""The normalized vectors are ``close`` down to this cosine similarity (aligned: 0.99845 at worst)."""
SIMILARITY_MARGIN = 0.01
"""A nearest-neighbour change is a tie when the reference's similarity to its own neighbour
is ahead of its similarity to the deployed side's by at most this (the largest change of any
pair's similarity under the aligned spec: 0.0103)."""
NEIGHBOURS = 5
"""The neighbours whose overlap is reported (top-k neighbour overlap), and recall's larger k."""
RECALL_AT = (1, NEIGHBOURS)
EMBEDDING_WORDS = ("embed", "feature", "descriptor", "vector", "pool")
"""Output names that say an embedding."""


def normalized(vector: np.ndarray) -> np.ndarray | None:
    """The vector divided by its L2 norm, float64; None when the norm is zero or not finite."""
    v = np.asarray(vector, np.float64).ravel()
    norm = math.sqrt(float(np.einsum("i,i->", v, v))) if np.isfinite(v).all() else math.nan
    return v / norm if norm and math.isfinite(norm) else None


def result_metrics(reference: np.ndarray, deployed: np.ndarray, min_cosine: float = MIN_COSINE) -> tuple[Verdict, dict]:
    """(verdict, metrics) of one image's normalized embeddings: the normalized vectors'
    errors (max, mean, L2) and cosine, ``close`` down to ``min_cosine``; diverged when either
    vector is zero or not finite."""
    ref, dep = normalized(reference), normalized(deployed)
    if ref is None or dep is None or ref.shape != dep.shape:
        finite = np.isfinite(reference).all(), np.isfinite(deployed).all()
        zero = (ref is None and finite[0]) or (dep is None and finite[1])
        metrics = {"max_abs": math.inf, "mean_abs": math.inf, "normalized_l2": math.inf, "cosine": 0.0,
                   "zero_vector": float(zero), "nonfinite": float(not all(finite))}
        if ref is not None and dep is not None:
            metrics = {"shape_mismatch": 1.0, "reference_shape": list(ref.shape), "deployed_shape": list(dep.shape)}
        return Verdict.DIVERGED, metrics
    metrics = ARRAYS(ref, dep, Tolerance()).metrics
    metrics = {k: metrics[k] for k in ("max_abs", "mean_abs", "cosine")}
    metrics["normalized_l2"] = math.sqrt(max(0.0, 2.0 - 2.0 * min(1.0, metrics["cosine"])))
    if metrics["max_abs"] == 0:
        return Verdict.EQUAL, metrics
    return (Verdict.CLOSE if metrics["cosine"] >= min_cosine else Verdict.DIVERGED), metrics


@dataclass(frozen=True)
class CosineRule:
    """The normalized vectors of one image are ``close`` down to ``min_cosine``."""

    min_cosine: float = MIN_COSINE


class NormalizedVectors(Comparator):
    """The embedding's result stage, a comparator (:class:`harness.task_api.Comparator`):
    one image's L2-normalized vectors (:func:`result_metrics`)."""

    tolerance_type = CosineRule

    def __call__(self, reference: np.ndarray, deployed: np.ndarray, tolerance: CosineRule) -> Comparison:
        return Comparison(*result_metrics(reference, deployed, tolerance.min_cosine))


def _encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode()


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f4").astype(np.float64)


def similarities(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarities of unit rows, each row's own similarity set to -inf (leave one out)."""
    s = vectors @ vectors.T
    np.fill_diagonal(s, -np.inf)
    return s


def nearest(sims: np.ndarray, k: int) -> np.ndarray:
    """[queries, k] indices of each row's k most similar, best first (ties by index)."""
    k = min(k, max(sims.shape[1] - 1, 0))
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


@dataclass(frozen=True)
class NeighbourChanges:
    """Each query's nearest neighbour, reference vs deployed, among one set of images."""

    reference: np.ndarray
    """[queries] the reference's nearest neighbour of each."""
    deployed: np.ndarray
    margins: np.ndarray
    """The reference's similarity to its neighbour minus its similarity to the deployed side's (0 if the same)."""
    overlap: np.ndarray
    """Each query's top-k neighbour overlap, k = :data:`NEIGHBOURS` (or fewer images)."""

    @staticmethod
    def of(reference: np.ndarray, deployed: np.ndarray) -> "NeighbourChanges":
        """From [images, features] unit rows of both sides, the same images in the same order."""
        ref_sims, dep_sims = similarities(reference), similarities(deployed)
        ref_top, dep_top = nearest(ref_sims, NEIGHBOURS), nearest(dep_sims, NEIGHBOURS)
        rows = np.arange(len(reference))
        ref_nn = ref_top[:, 0] if ref_top.size else rows
        dep_nn = dep_top[:, 0] if dep_top.size else rows
        margins = ref_sims[rows, ref_nn] - ref_sims[rows, dep_nn] if ref_top.size else np.zeros(len(rows))
        k = ref_top.shape[1]
        overlap = np.array([len(set(a) & set(b)) / k for a, b in zip(ref_top, dep_top)]) if k else np.ones(len(rows))
        return NeighbourChanges(ref_nn, dep_nn, np.where(ref_nn == dep_nn, 0.0, margins), overlap)

    def changed(self) -> np.ndarray:
        return np.flatnonzero(self.reference != self.deployed)

    def verdict(self, i: int, margin: float) -> Verdict:
        return Verdict.TIE if self.margins[i] <= margin else Verdict.DIVERGED


@dataclass(frozen=True)
class NeighbourRule:
    """A nearest-neighbour change is a tie within ``margin`` (cosine similarity), else a divergence."""

    margin: float = SIMILARITY_MARGIN


@dataclass(frozen=True)
class NeighbourComparison(Comparison):
    changes: NeighbourChanges | None = None


class Neighbours(Comparator):
    """Each image's nearest neighbour among a set of images, reference vs deployed
    ([images, features] unit rows of both sides, the same images in the same order): the
    worst change's verdict, the changes and the mean top-k overlap."""

    tolerance_type = NeighbourRule

    def __call__(self, reference: np.ndarray, deployed: np.ndarray, tolerance: NeighbourRule) -> NeighbourComparison:
        changes = NeighbourChanges.of(reference, deployed)
        verdicts = [changes.verdict(i, tolerance.margin) for i in changes.changed()]
        same = np.array_equal(reference, deployed)
        verdict = Verdict.worst(verdicts) if verdicts else Verdict.EQUAL if same else Verdict.CLOSE
        metrics = {"neighbour_changes": len(verdicts), "ties": sum(v is Verdict.TIE for v in verdicts),
                   "neighbour_overlap": float(changes.overlap.mean()) if len(reference) > 1 else None}
        return NeighbourComparison(verdict, metrics, changes)


class NeighbourEvents(Events):
    """The run's neighbour changes: every compared image's two normalized embeddings are kept
    (2 x 4 bytes a feature: 10 KB an image for 1280 features) and compared at the end."""

    task = "embedding"

    def __init__(self, margin: float):
        self.margin = margin
        self.names: list[str] = []
        self.vectors: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, result) -> None:
        data = result.task_data
        if data and "reference" in data and "deployed" in data:
            self.names.append(result.image)
            self.vectors.append((_decode(data["reference"]), _decode(data["deployed"])))

    def result(self):
        order = sorted(range(len(self.names)), key=lambda i: self.names[i])
        names = [self.names[i] for i in order]
        figures = {"gallery": len(names), "tie_margin": self.margin, "neighbours": NEIGHBOURS}
        if len(names) < 2:
            return (), {**figures, "neighbour_changes": 0, "neighbour_overlap": None}
        changes = Neighbours()(np.stack([self.vectors[i][0] for i in order]),
                               np.stack([self.vectors[i][1] for i in order]), NeighbourRule(self.margin)).changes
        events = tuple(Event(names[i], changes.verdict(i, self.margin),
                             {"reference_neighbour": names[changes.reference[i]],
                              "deployed_neighbour": names[changes.deployed[i]],
                              "margin": float(changes.margins[i])}) for i in changes.changed())
        return events, {**figures, "neighbour_changes": len(events),
                        "neighbour_overlap": float(changes.overlap.mean())}


def export_features(folder: Path, spec, config) -> Path:
    """EfficientNet-Lite0's pooled features: the classifier's weights cut before its head."""
    return export_embedder(folder, spec.preprocess.crop.size)


def check_features(folder: Path, spec, config) -> None:
    check_embedder_onnx(folder / ONNX_FILENAME, spec.preprocess.crop.size)


class Embedding(Task):
    name = "embedding"
    # The embedder shares the classifier's preprocessing; on a GPU it is a TensorRT engine as the
    # classifier is, on CPU the same ONNX in ONNX Runtime.
    repository = TaskModels("embed", "embedder", "input", "embedding", "EMBEDDING",
                            added=("embedder", "embed_dali", "embed_opencv"), engines=("embedder",),
                            shipped=(ShippedModel("embedder", ONNX_ON_CPU, export_features,
                                                  "exported its pooled features (the embedding task's model) to {path}",
                                                  check_features),))
    noun = "an embedding"
    result_stage = Stage.POSTPROCESS
    result_in_table = True
    output_words = "the raw embedding"
    event_words = ("nearest-neighbour change", "nearest-neighbour changes")
    flip_words = "nearest-neighbour changes"
    agreement_words = "nearest-neighbour agreement"
    tie_words = ("nearest-neighbour change is a near tie (the reference barely preferred its own neighbour)",
                 "nearest-neighbour changes are near ties (the reference barely preferred its own neighbours)")
    csv_fields = ("postprocess_verdict", "cosine", "normalized_l2", "zero_vector")

    # -- discovery ----------------------------------------------------------------------------
    def choose_output(self, model, choice):
        candidates = vector_outputs(model.outputs)
        if choice is not None:
            named = [t for t in model.outputs if t.name == choice]
            if not named:
                return OutputChoice(None, why=f"model {model.name!r} has no output {choice!r}; "
                                              f"outputs: {', '.join(map(describe, model.outputs))}")
            if named[0] not in candidates:
                return OutputChoice(None, why=f"output {describe(named[0])} of {model.name!r} is not an embedding "
                                              "(one FP32 dimension of features)")
            return OutputChoice(named[0].name, "embedding", why="named by --output")
        if not candidates:
            outputs = ", ".join(map(describe, model.outputs)) or "none"
            return OutputChoice(None, why=f"model {model.name!r} has no output holding an embedding (one FP32 "
                                          f"[features] tensor); outputs: {outputs}")
        named = [t for t in candidates if self.signs(t, t.name in model.labelled)]
        return OutputChoice((named or candidates)[0].name, "embedding",
                            why="named as an embedding" if named else "the one vector output")

    def signs(self, tensor, labelled):
        if labelled or tensor not in vector_outputs([tensor]):
            return None
        if any(w in tensor.name.lower() for w in EMBEDDING_WORDS):
            return f"output {tensor.name} is named as an embedding"
        return None

    def output_kind(self, name, probe):
        return EMBEDDING

    # -- comparison -------------------------------------------------------------------------------
    def output_tolerance(self, kind):
        return OUTPUT_TOLERANCE

    def default_margin(self, tolerances, kind):
        return SIMILARITY_MARGIN

    def margin_units(self, kind):
        return "cosine similarity"

    def compare_result(self, reference, deployed, isolated, margin, top_k, scores=EMBEDDING):
        return NormalizedVectors().stage(Stage.POSTPROCESS, reference, deployed, isolated, CosineRule())

    def image_data(self, reference, deployed):
        ref, dep = normalized(reference), normalized(deployed)
        if ref is None or dep is None or ref.shape != dep.shape:
            return None
        return {"reference": _encode(ref), "deployed": _encode(dep)}

    def events(self, margin):
        return NeighbourEvents(margin)

    def csv_values(self, stage):
        if stage is None:
            return [""] * len(self.csv_fields)
        m = stage.metrics
        return [stage.verdict.value, m.get("cosine", ""), m.get("normalized_l2", ""), m.get("zero_vector", 0.0)]

    # -- reports ------------------------------------------------------------------------------------
    def summary_line(self, report):
        s = report.summary
        post = s.stage(Stage.POSTPROCESS)
        if post is None:
            return None
        figures, events = s.figures, s.events
        line = (f"Embeddings: cosine similarity worst **{fmt(post.metric('cosine'))}**, mean "
                f"{fmt(post.metric('cosine', 'mean'))} (close down to {MIN_COSINE}); normalized vectors' error (L2) "
                f"worst {fmt(post.metric('normalized_l2'))}.")
        if figures.get("gallery", 0) >= 2:
            ties = s.ties
            line += (f" Nearest neighbour among the {figures['gallery']} images changed for **{len(events)}**"
                     + (f" ({ties} {'is a tie' if ties == 1 else 'are ties'})" if events else "")
                     + f"; mean top-{figures['neighbours']} neighbour overlap {figures['neighbour_overlap']:.3f}.")
        zero = post.metric("zero_vector")
        if zero:
            line += " **Some embedding is a zero vector** (no direction: see the per-image CSV)."
        if post.isolated:
            line += (" With the reference input, the deployed embedder alone: cosine worst "
                     f"{fmt(post.metric('cosine', isolated=True))}.")
        return line

    def headline(self, report):
        ties = report.summary.ties
        if not ties:
            return ""
        return (f" {ties} nearest-neighbour {'change is a tie' if ties == 1 else 'changes are ties'} (within the "
                f"margin of {fmt(report.tie_margin)} in cosine similarity: not a divergence).")

    def sections(self, report):
        events = report.summary.events
        if not events:
            return []
        rows = tuple((e.image, Verdict(e.verdict).value, e.details["reference_neighbour"],
                      e.details["deployed_neighbour"], fmt(e.details["margin"])) for e in events)
        note = ("A **tie** is a change the reference barely prefers: its similarity to its own nearest neighbour is "
                "ahead of its similarity to the deployed side's by no more than the margin. It is listed, not counted "
                "as a divergence.")
        return [Section("Images whose nearest neighbour changed", note,
                        ("image", "verdict", "reference neighbour", "deployed neighbour",
                         "reference margin (cosine similarity)"), rows, verdict_column=1, name_columns=(0, 2, 3))]

    # -- diagnose -------------------------------------------------------------------------------------
    def diagnose_gallery(self, deployed):
        rows = [normalized(d) for d in deployed]
        width = next((r.size for r in rows if r is not None), 0)
        return np.stack([r if r is not None else np.zeros(width) for r in rows]) if rows else None

    # -- harness infer ---------------------------------------------------------------------------------
    def infer(self, client, asked):
        return infer_table(self, client, asked)

    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        query = normalized(reference)
        if query is None or gallery is None or len(gallery) < 2 or query.shape[0] != gallery.shape[1]:
            return Verdict.DIVERGED, 1.0
        sims_ref, sims_dep = gallery @ query, gallery @ gallery[index]
        sims_ref[index] = sims_dep[index] = -np.inf
        ref_nn, dep_nn = int(np.argmax(sims_ref)), int(np.argmax(sims_dep))
        if ref_nn == dep_nn:
            return Verdict.CLOSE, 0.0
        return (Verdict.TIE if sims_ref[ref_nn] - sims_ref[dep_nn] <= margin else Verdict.DIVERGED), 1.0

    # -- effect on a labeled set ----------------------------------------------------------------------
    progress_word = "embedding"
    unshardable = "each image is searched for among all the others"

    def effect_on(self, observed) -> "Retrieval":
        return dataclasses.replace(super().effect_on(observed), names=tuple(s.name for s in observed.evaluated))

    def effect(self, labels: Sequence[str | None], outputs: Mapping[str, np.ndarray], margin: float) -> "Retrieval":
        """Retrieval on the images every path embedded (``outputs``: path -> [images, features],
        the reference first), labels by image in the same order."""
        return retrieval(labels, outputs, margin)


@dataclass(frozen=True)
class PathRetrieval:
    """One path's retrieval on the labeled images (recall None without labels), and against the reference."""

    path: str
    recall: Mapping[int, float | None]
    """k -> share of the counted queries with an image of their label among their k nearest."""
    neighbour_changes: int | None = None
    ties: int | None = None
    neighbour_overlap: float | None = None
    mcnemar: McNemar | None = None
    changes: tuple[tuple[int, int, int, float, str], ...] = ()
    """(query, reference neighbour, deployed neighbour, margin, verdict) of each change."""

    def to_dict(self, names: Sequence[str]) -> dict:
        out = {"path": self.path, **{f"recall@{k}": v for k, v in self.recall.items()}}
        if self.neighbour_changes is not None:
            out.update({"neighbour_changes": self.neighbour_changes, "ties": self.ties,
                        "diverged_changes": self.neighbour_changes - (self.ties or 0),
                        f"top{NEIGHBOURS}_neighbour_overlap": self.neighbour_overlap,
                        "mcnemar": self.mcnemar.to_dict() if self.mcnemar else None,
                        "changes": [{"image": names[q], "reference_neighbour": names[r],
                                     "deployed_neighbour": names[d], "margin": m, "verdict": v}
                                    for q, r, d, m, v in self.changes]})
        return out


@dataclass(frozen=True)
class Retrieval:
    """The embedding task's effect on a labeled set: one :class:`PathRetrieval` per path."""

    paths: tuple[PathRetrieval, ...]
    images: int
    queries: int
    """Images counted as queries: their label has another image."""
    margin: float
    names: tuple[str, ...] = ()
    """The images' names, in the outputs' order (the cases name them)."""

    def cases(self, models: Sequence[str], ties_fail: bool, group: str) -> list[Case]:
        """Each deployed path's nearest-neighbour changes: failed beyond the tie margin, or on any
        with ``ties_fail``."""
        cases = []
        for path, model in zip(self.to_dict(self.names)["paths"][1:], models):
            changes = [c for c in path["changes"] if ties_fail or c["verdict"] == "diverged"]
            said = f"{len(changes)} of {len(self.names)} images' nearest neighbour changed" + (
                "" if ties_fail else " beyond the tie margin")
            reason = (f"{said} ({path['ties'] or 0} ties in all): " + ", ".join(str(c["image"]) for c in changes[:10])
                      if changes else f"no nearest-neighbour change beyond the tie margin ({path['ties'] or 0} ties)")
            details = "\n".join(f"{c['image']}: {c['verdict']}, reference neighbour {c['reference_neighbour']}, "
                                 f"deployed {c['deployed_neighbour']}" for c in path["changes"])
            cases.append(Case(str(model), group, Status.FAILED if changes else Status.PASSED, reason, details))
        return cases

    def any_changes(self, ties: bool = True) -> bool:
        return any((p.neighbour_changes if ties else (p.neighbour_changes or 0) - (p.ties or 0))
                   for p in self.paths[1:])

    def to_dict(self, names: Sequence[str]) -> dict:
        return {"task": "embedding", "images": self.images, "queries": self.queries, "tie_margin": self.margin,
                "metrics": [f"recall@{k}" for k in RECALL_AT] + [f"top{NEIGHBOURS}_neighbour_overlap",
                                                                  "neighbour_changes"],
                "paths": [p.to_dict(names) for p in self.paths]}

    def markdown(self, names: Sequence[str], shown: int = 50) -> list[str]:
        columns = ("path", *(f"recall@{k}" for k in RECALL_AT), "diff @1", f"top-{NEIGHBOURS} neighbour overlap",
                   "nearest neighbour changed", "without ties", "McNemar b/c, p (recall@1)")
        ref = self.paths[0]
        lines = [f"Retrieval, leave one out, over {self.images} images ({self.queries} queries whose label another "
                 "image has); a neighbour change the reference prefers by at most "
                 f"{fmt(self.margin)} in cosine similarity is a tie.", "",
                 "| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
        for p in self.paths:
            cells = [p.path, *(_percent(p.recall[k]) for k in RECALL_AT)]
            if p is ref:
                cells += ["", "", "", "", ""]
            else:
                diff = None if p.recall[1] is None or ref.recall[1] is None else 100 * (p.recall[1] - ref.recall[1])
                cells += ["" if diff is None else f"{diff:+.1f} pts", fmt(p.neighbour_overlap),
                          f"{p.neighbour_changes} ({p.neighbour_changes / self.images:.1%})",
                          str(p.neighbour_changes - p.ties),
                          f"{p.mcnemar.b}/{p.mcnemar.c}, {p.mcnemar.p_value:.3g}" if p.mcnemar else "-"]
            lines.append("| " + " | ".join(cells) + " |")
        for p in self.paths[1:]:
            if p.changes:
                lines += ["", f"## `{p.path}`: images whose nearest neighbour changed"
                          + (f" (first {shown} of {len(p.changes)})" if len(p.changes) > shown else ""), "",
                          "| image | verdict | reference neighbour | deployed neighbour | reference margin |",
                          "|---|---|---|---|---|"]
                lines += [f"| {names[q]} | {'**diverged**' if v == 'diverged' else v} | {names[r]} | {names[d]} "
                          f"| {fmt(m)} |" for q, r, d, m, v in p.changes[:shown]]
        return lines


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def recall_hits(labels: np.ndarray, top: np.ndarray, k: int, counted: np.ndarray) -> np.ndarray:
    """Per counted query: an image of its label among its k nearest."""
    return np.any(labels[top[:, :k]] == labels[:, None], axis=1)[counted]


def retrieval(labels: Sequence[str | None], outputs: Mapping[str, np.ndarray], margin: float) -> Retrieval:
    """:class:`Retrieval` of each path's [images, features] outputs (the reference first);
    ``labels`` per image (None: unlabeled; then recall is None)."""
    unit = {path: np.stack([normalized(v) for v in vectors]) for path, vectors in outputs.items()}
    paths = list(unit)
    n = len(labels)
    known = np.array([label is not None for label in labels])
    codes = np.unique([str(x) for x in labels], return_inverse=True)[1] if n else np.zeros(0, int)
    codes = np.where(known, codes, -1 - np.arange(n))  # an unlabeled image matches nothing
    counts = np.bincount(codes[known]) if known.any() else np.zeros(0, int)
    counted = known & np.array([known[i] and counts[codes[i]] > 1 for i in range(n)], bool)
    tops = {p: nearest(similarities(unit[p]), NEIGHBOURS) for p in paths}
    hits = {p: {k: recall_hits(codes, tops[p], k, counted) for k in RECALL_AT} for p in paths}
    reference = paths[0]
    out = []
    for p in paths:
        recall = {k: (float(hits[p][k].mean()) if counted.any() else None) for k in RECALL_AT}
        if p == reference:
            out.append(PathRetrieval(p, recall))
            continue
        changes = Neighbours()(unit[reference], unit[p], NeighbourRule(margin)).changes
        changed = changes.changed()
        rows = tuple((int(i), int(changes.reference[i]), int(changes.deployed[i]), float(changes.margins[i]),
                      changes.verdict(i, margin).value) for i in changed)
        ties = sum(r[4] == Verdict.TIE.value for r in rows)
        test = mcnemar_exact(hits[reference][1], hits[p][1]) if counted.any() else None
        out.append(PathRetrieval(p, recall, len(rows), ties, float(changes.overlap.mean()) if n > 1 else None,
                                 test, rows))
    return Retrieval(tuple(out), n, int(counted.sum()), margin)


# -- harness infer ------------------------------------------------------------------------------


def _embedders(task, client, asked) -> dict:
    """Column name -> ``embed(data)`` (the raw output row), for ``--task embedding``."""
    from harness.deployment.base import ImageRequest
    from harness.deployment.discovery import image_input, read_model, task_output

    deployed = asked.deployed
    if not deployed.models:
        models = task.repository
        return {models.ensemble(p): (lambda data, p=p: client.infer(
            models.ensemble(p), {"IMAGE": pack_images([data])}, [models.ensemble_output])[models.ensemble_output][0])
            for p in asked.pipelines}
    out = {}
    for name in deployed.models:
        info = read_model(client, name)
        _, tensor, _ = task_output(info, deployed.task, deployed.output, tasks=asked.tasks)
        request = ImageRequest(name, image_input(info), info.batched)
        asked.say(f"{name}: image input {request.describe()}, embedding {tensor.describe()}")
        out[name] = lambda data, r=request, t=tensor.name: client.infer(r.model, r.inputs([data]), [t])[t].reshape(-1)
    return out


def infer_table(task, client, asked) -> int:
    """Each image's embedding through each model, and its nearest among the other images given."""
    from rich.progress import track
    from rich.table import Table

    from harness.client import ServerUnavailable
    from harness.result import one_line

    files = asked.files

    embedders = _embedders(task, client, asked)
    rows: dict[str, dict[str, object]] = {name: {} for name in embedders}
    for path in track(files, description="embedding", console=asked.console, transient=True):
        try:
            data = read_input(InputFile.of(path))
        except OSError as exc:
            for found in rows.values():
                found[identifier(path)] = f"unreadable: {getattr(exc, 'reason', None) or exc.strerror or exc}"
            continue
        for name, embed in embedders.items():
            try:
                vector = np.asarray(embed(data), np.float64)
                unit = normalized(vector)
                rows[name][identifier(path)] = (unit if unit is not None
                                                else f"a zero or non-finite embedding ({vector.size} values)")
            except ServerUnavailable as exc:
                raise ServerStopped(client.url, identifier(path), str(exc)) from None
            except Exception as exc:
                rows[name][identifier(path)] = one_line(exc)
    table = Table(title=f"nearest {asked.top_k} of the other images (cosine similarity)")
    table.add_column("image")
    cells: dict[str, dict[str, str]] = {}
    for name, found in rows.items():
        table.add_column(name)
        good = [n for n, v in found.items() if not isinstance(v, str)]
        cells[name] = {n: f"[red]{terminal_text(v)}[/]" for n, v in found.items() if isinstance(v, str)}
        if good:
            sims = similarities(np.stack([found[n] for n in good]))
            for i, top in enumerate(nearest(sims, asked.top_k)):
                cells[name][good[i]] = "\n".join(f"{sims[i, j]:.3f} {terminal_text(good[j])}" for j in top) or "-"
    for path in files:
        table.add_row(terminal_text(identifier(path)), *(cells[name].get(identifier(path), "") for name in rows))
    from rich.console import Console

    Console().print(table)
    asked.say_skipped()
    return 1 if any(isinstance(v, str) for found in rows.values() for v in found.values()) else 0
