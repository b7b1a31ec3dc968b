"""Layer-by-layer comparison of executions, streamed: the core API of ``harness layers``.

:func:`compare_layers` runs every execution on each batch of model inputs, compares every
layer of every other execution with the first one's (the reference), folds the errors into
running sums per layer (:class:`_Running`) and drops the batch: memory holds one batch of
activations, whatever the number of images. Polygraphy's ``Comparator.compare_accuracy``
would keep every output of every iteration (its ``RunResults``) until it compares, so the
comparison is done here, with the same statistics (max/mean absolute error, relative
error, cosine, NaN/Inf counts).

A layer's error is judged relative to its own scale, as activations range from 1e-3 to
1e3 across a network: its *relative RMS error* ``sqrt(sum err^2 / sum ref^2)`` on one image
(:class:`LayerTolerance`). The first layer in topological order whose worst image is beyond
it is the *first divergent layer*.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np

from harness.layers.executions import Execution, LayerGraph
from harness.model import LOGITS
from harness.results.interface import Case, Status
from harness.task_api import Comparison, Fold
from harness.verdict import Verdict


@dataclass(frozen=True)
class LayerTolerance:
    """When a layer is ``close``: its relative RMS error on every image at most ``rel_rms``
    (default 0.05, i.e. SQNR >= 26 dB) and no NaN or Inf. fp16 stays below 0.01 on every
    layer of EfficientNet-Lite0 (docs/layers.md has the figures); an overflow, a wrong
    weight or a training-mode export is far beyond."""

    rel_rms: float = 0.05


@dataclass(frozen=True)
class LayerRow:
    """One layer of one execution against the reference, over every image."""

    node: str
    op_type: str
    depth: int
    """Position in the reference graph's topological order (0 = first layer)."""
    max_abs: float
    mean_abs: float
    rel_rms: float
    """Worst image's relative RMS error (see the module doc)."""
    cosine: float
    """Worst (lowest) image's cosine similarity."""
    nan: int
    inf: int
    """NaN and Inf values in this execution's output (the reference's are in ``reference_nonfinite``)."""
    reference_nonfinite: int
    worst_image: str
    verdict: Verdict

    def to_dict(self) -> dict:
        return {**{k: finite_or_text(v) for k, v in self.__dict__.items() if k != "verdict"}, "verdict": self.verdict.value}


def finite_or_text(v):
    """``v``, or ``"inf"``/``"nan"`` for a non-finite float: JSON has neither."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


@dataclass(frozen=True)
class PairResult:
    """One execution (``other``) against the reference, layer by layer."""

    reference: str
    other: str
    rows: tuple[LayerRow, ...]
    unmatched: tuple[str, ...]
    """Reference layers this execution has no output for (fused, folded away, or not a module)."""
    first_divergent_layer: str | None
    trend: str
    """What the error does after the first divergent layer: ``grows``, ``heals`` (the output
    is within tolerance again) or ``persists``; with no divergent layer, ``none``."""
    growth: float
    """The output layer's relative RMS error over the first erring layer's (1.0: no growth)."""
    top1_agreement: float
    """Share of images whose logits' top-1 is the reference's (nan without a logits layer)."""

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(r.verdict for r in self.rows)

    def to_dict(self) -> dict:
        return {"reference": self.reference, "execution": self.other, "verdict": self.verdict.value,
                "first_divergent_layer": self.first_divergent_layer, "trend": self.trend,
                "growth": finite_or_text(self.growth), "top1_agreement": finite_or_text(self.top1_agreement),
                "unmatched": list(self.unmatched), "layers": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True)
class LayersResult:
    """Every pair of a ``harness layers`` run; the first pair's first divergent layer is the run's."""

    model: str
    executions: tuple[str, ...]
    images: int
    failed: tuple[tuple[str, str], ...]
    """(image, reason) of the files that could not be preprocessed."""
    tolerance: LayerTolerance
    pairs: tuple[PairResult, ...]
    unmatched_modules: tuple[str, ...] = field(default=())
    """``torch`` modules with no ONNX layer (identity paddings, dropout)."""
    skipped: tuple[tuple[str, str], ...] = field(default=())
    """(entry, why) of the folder's entries that are not images (hidden, a sub-folder, a link
    leading out): listed as check lists them."""

    @property
    def first_divergent_layer(self) -> str | None:
        return next((p.first_divergent_layer for p in self.pairs if p.first_divergent_layer), None)

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(p.verdict for p in self.pairs)

    # -- the report interface (harness.results.interface); verdict above: the worst layer's --

    job = "layers"

    @property
    def title(self) -> str:
        return f"Layers of {self.model}: {', '.join(self.executions)}"

    @property
    def passed(self) -> bool:
        """Exit status 0: no layer diverged."""
        return self.first_divergent_layer is None

    def cases(self) -> list[Case]:
        """Each execution against the reference (failed at a divergent layer, the reason
        naming it), and each file that could not be preprocessed (skipped)."""
        cases = []
        for pair in self.pairs:
            diverged = [r for r in pair.rows if r.verdict is Verdict.DIVERGED]
            details = "\n".join(f"{r.node} ({r.op_type}, depth {r.depth}): relative RMS error {fmt(r.rel_rms)}, worst "
                                 f"image {r.worst_image}" for r in diverged[:20])
            cases.append(Case(f"{pair.other} vs {pair.reference}", f"layers.{self.model}",
                              Status.FAILED if pair.first_divergent_layer else Status.PASSED, pair_line(pair), details))
        cases += [Case(image, f"layers.{self.model}.unreadable", Status.SKIPPED, reason) for image, reason in self.failed]
        cases += [Case(entry, f"layers.{self.model}.skipped", Status.SKIPPED, reason) for entry, reason in self.skipped]
        return cases

    def to_dict(self) -> dict:
        return {"model": self.model, "executions": list(self.executions), "images": self.images,
                "failed": [{"image": i, "reason": r} for i, r in self.failed],
                "skipped": [{"image": i, "reason": r} for i, r in self.skipped],
                "tolerance": self.tolerance.__dict__, "verdict": self.verdict.value,
                "first_divergent_layer": self.first_divergent_layer,
                "unmatched_modules": list(self.unmatched_modules), "pairs": [p.to_dict() for p in self.pairs]}


def fmt(v: float) -> str:
    if isinstance(v, str) or not math.isfinite(v):
        return str(v)
    return "0" if v == 0 else f"{v:.3g}"


def pair_line(pair: PairResult) -> str:
    """One sentence on a pair: equal/close/diverged, where it first diverges, what the error then does."""
    rows = len(pair.rows)
    top1 = "" if math.isnan(pair.top1_agreement) else f"; top-1 agreement {pair.top1_agreement:.1%}"
    if pair.first_divergent_layer is None:
        worst = max(pair.rows, key=lambda r: r.rel_rms)
        return (f"{pair.other} vs {pair.reference}: {pair.verdict.value} on all {rows} layers; worst relative RMS error "
                f"{fmt(worst.rel_rms)} at {worst.node}; the output's error is {fmt(pair.growth)}x the first erring "
                f"layer's{top1}")
    return (f"{pair.other} vs {pair.reference}: first divergent layer {pair.first_divergent_layer}; after it the error "
            f"{pair.trend}{top1}")


class _Running(Fold):
    """Running aggregates of one layer of one pair: O(1) memory per layer (the comparison
    protocol's streaming :class:`~harness.task_api.Fold`, judged by a :class:`LayerTolerance`)."""

    tolerance_type = LayerTolerance

    __slots__ = ("max_abs", "sum_abs", "count", "rel_rms", "cosine", "nan", "inf", "ref_nonfinite",
                 "worst", "present")

    def __init__(self):
        self.max_abs = self.sum_abs = self.rel_rms = 0.0
        self.count = self.nan = self.inf = self.ref_nonfinite = 0
        self.cosine = 1.0
        self.worst, self.present = "", False

    def add(self, ref: np.ndarray, other: np.ndarray, names: list[str]) -> None:
        """Fold one batch in, per image in float32, in as few passes over the activations as
        possible (this is most of a run's cost): the difference, then BLAS on each image's
        row: three dot products (a.a, a.d, d.d give the error, the signal and the cosine),
        sum |d| and the index of max |d| (one pass each, no |d| array; float32 accumulation, as
        numpy's einsum had, at a third of its time). NaN/Inf are counted only when d.d says so."""
        from scipy.linalg import blas  # here: this module is imported by every command's parser

        self.present = True
        n = len(names)
        a = _float32(ref).reshape(n, -1)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.subtract(_float32(other).reshape(n, -1), a)
        noise = np.array([blas.sdot(d, d) for d in diff])
        self.count += diff.size
        if not np.isfinite(noise).all():  # an Inf or NaN (or an overflow): the layer's statistics are infinite
            self.nan += int(np.isnan(other).sum())
            self.inf += int(np.isinf(other).sum())
            self.ref_nonfinite += int(a.size - np.isfinite(a).sum())
            self.max_abs = self.sum_abs = self.rel_rms = math.inf
            self.cosine = 0.0
            self.worst = self.worst or names[int(np.argmin(np.isfinite(noise)))]
            return
        signal = np.array([blas.sdot(x, x) for x in a])
        cross = np.array([blas.sdot(x, d) for x, d in zip(a, diff)])
        self.max_abs = max(self.max_abs, max(abs(float(d[blas.isamax(d)])) for d in diff))  # scipy's isamax: 0-based
        self.sum_abs += sum(blas.sasum(d) for d in diff)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(signal > 0, np.sqrt(noise / signal), np.where(noise == 0, 0.0, math.inf))
            power = np.maximum(signal + 2 * cross + noise, 0.0)  # |b|^2 = |a|^2 + 2 a.d + |d|^2
            cos = np.where((signal > 0) & (power > 0), (signal + cross) / np.sqrt(signal * power), (signal == power) * 1.0)
        self.cosine = min(self.cosine, float(np.clip(cos, -1.0, 1.0).min()))
        worst = int(np.argmax(rel))
        if rel[worst] > self.rel_rms or not self.worst:
            self.rel_rms, self.worst = max(float(rel[worst]), self.rel_rms), names[worst]

    def result(self, tolerance: LayerTolerance) -> Comparison:
        if self.max_abs == 0 and not (self.nan or self.inf):
            verdict = Verdict.EQUAL
        elif self.nan or self.inf or not self.rel_rms <= tolerance.rel_rms:
            verdict = Verdict.DIVERGED
        else:
            verdict = Verdict.CLOSE
        return Comparison(verdict, {"max_abs": self.max_abs, "mean_abs": self.sum_abs / self.count if self.count else 0.0,
                                    "rel_rms": self.rel_rms, "cosine": self.cosine, "nan": self.nan, "inf": self.inf,
                                    "reference_nonfinite": self.ref_nonfinite, "worst_image": self.worst})

    def row(self, node: str, op: str, depth: int, tolerance: LayerTolerance) -> LayerRow:
        found = self.result(tolerance)
        return LayerRow(node, op, depth, **found.metrics, verdict=found.verdict)


def _float32(x: np.ndarray) -> np.ndarray:
    """``x`` as float32. fp16 goes through OpenCV's F16C conversion: numpy 1.26 casts float16
    without SIMD (2.4 ms per million values, 10x OpenCV), which made the cast most of an fp16
    comparison. (torch's is as fast on one thread, but spins its thread pool on a busy host.)"""
    if x.dtype == np.float32:
        return x
    if x.dtype == np.float16:
        import cv2

        # convertFp16 reads CV_16S as the bits of halves; a Mat is 2-D: one row per image.
        rows = np.ascontiguousarray(x).reshape(len(x), -1).view(np.int16)
        return cv2.convertFp16(rows).reshape(x.shape)
    return x.astype(np.float32)


def compare_layers(batches: Iterable[tuple[list[str], np.ndarray]], executions: list[Execution],
                   graph: LayerGraph, tolerance: LayerTolerance = LayerTolerance(),
                   layers: list[str] | None = None, progress: Callable[[int], None] = lambda n: None,
                   ) -> tuple[tuple[PairResult, ...], int]:
    """(one :class:`PairResult` per execution after the first, images compared).

    ``batches`` yields (image names, model inputs [N, 3, H, W] float32); ``layers`` restricts
    the comparison to these node names (default: every layer of ``graph``; raises
    :class:`~harness.layers.executions.LayersError` for a name that is no layer);
    ``progress`` gets the running image count after each batch."""
    if layers:
        graph.check_names(layers)
    wanted = set(layers or graph.nodes)
    order = [(d, n, op) for d, (n, op) in enumerate(zip(graph.nodes, graph.op_types)) if n in wanted]
    running = [{n: _Running() for _, n, _ in order} for _ in executions[1:]]
    top1 = [[0, 0] for _ in executions[1:]]
    logits_node = graph.node_of().get(LOGITS)
    images = 0

    def fold(reference: dict, outputs: dict, stats: dict[str, _Running], agree: list[int], names: list[str]) -> None:
        for _, node, _ in order:
            if node in reference and node in outputs:
                stats[node].add(reference[node], outputs[node], names)
        if logits_node in reference and logits_node in outputs:
            agree[0] += int((reference[logits_node].argmax(1) == outputs[logits_node].argmax(1)).sum())
            agree[1] += len(names)

    # One execution's outputs are folded in on a worker thread while the next execution runs:
    # the folding is numpy, BLAS and OpenCV (they release the GIL), and ONNX Runtime leaves
    # a core partly idle on the marked graph's small elementwise nodes. It holds one more
    # execution's activations, not more images: memory stays flat.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="layers-fold") as pool:
        folding = None
        for names, batch in batches:
            reference = executions[0](batch)
            for execution, stats, agree in zip(executions[1:], running, top1):
                outputs = execution(batch)
                if folding is not None:
                    folding.result()
                folding = pool.submit(fold, reference, outputs, stats, agree, names)
                del outputs
            images += len(names)
            progress(images)
        if folding is not None:
            folding.result()
    pairs = tuple(_pair(executions[0].name, e.name, stats, order, tolerance, agree)
                  for e, stats, agree in zip(executions[1:], running, top1))
    return pairs, images


def _pair(reference: str, other: str, stats: dict[str, _Running], order, tolerance: LayerTolerance,
          agree: list[int]) -> PairResult:
    rows = tuple(stats[n].row(n, op, d, tolerance) for d, n, op in order if stats[n].present)
    unmatched = tuple(n for _, n, _ in order if not stats[n].present)
    first = next((r for r in rows if r.verdict is Verdict.DIVERGED), None)
    erring = [r for r in rows if r.rel_rms > 0]
    last = rows[-1] if rows else None
    if first is None:
        trend = "none"
    elif last.verdict is not Verdict.DIVERGED:
        trend = "heals"
    elif last.rel_rms > first.rel_rms or (math.isinf(last.rel_rms) and not math.isinf(first.rel_rms)):
        trend = "grows"
    else:
        trend = "persists"
    if erring and last is not None and erring[0].rel_rms > 0:
        growth = last.rel_rms / erring[0].rel_rms if math.isfinite(erring[0].rel_rms) else 1.0
    else:
        growth = 1.0
    return PairResult(reference, other, rows, unmatched, first.node if first else None, trend, growth,
                      agree[0] / agree[1] if agree[1] else math.nan)


def batches_of(items: Iterable[tuple[str, np.ndarray]], size: int) -> Iterator[tuple[list[str], np.ndarray]]:
    """Group (name, input [3, H, W]) into batches of ``size`` (the last one may be smaller)."""
    names: list[str] = []
    arrays: list[np.ndarray] = []
    for name, array in items:
        names.append(name)
        arrays.append(array)
        if len(names) == size:
            yield names, np.stack(arrays)
            names, arrays = [], []
    if names:
        yield names, np.stack(arrays)
