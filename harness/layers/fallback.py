"""The automatic fp32 fallback: the smallest set of layers to keep in fp32 so that the fp16
model agrees with fp32 on calibration images.

:func:`find_fp32_fallback` converts the model to fp16 (:func:`harness.precision.export_fp16`)
and checks it (:func:`fp16_agrees`: every image's logits within the output tolerance and the
same top-1). When it fails, the layers are ranked as ``harness layers onnx,onnx-fp16`` ranks
them (NaN/Inf first, then by relative RMS error, ties in topological order) and bisected as
Polygraphy's ``debug precision`` does for TensorRT: the shortest prefix of the ranking that,
kept in fp32, passes. That prefix is then pruned one layer at a time (a layer whose removal
still passes was not needed), so the set is minimal: removing any one layer of it fails.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from harness.compare.comparators import ARRAYS
from harness.errors import HarnessError
from harness.layers.compare import LayerTolerance, PairResult, batches_of, compare_layers, finite_or_text
from harness.layers.executions import LayerGraph, OnnxExecution, load_onnx, open_executions
from harness.model import INPUT_NAME, LOGITS, onnx_session
from harness.precision import export_fp16
from harness.tolerance import Tolerance


class FallbackError(HarnessError, RuntimeError):
    """Even with every ranked layer in fp32, fp16 does not agree with fp32."""


@dataclass(frozen=True)
class Fallback:
    """What :func:`find_fp32_fallback` found."""

    fp32_layers: tuple[str, ...]
    """Node names kept in fp32, in topological order (empty: fp16 is safe as it is)."""
    images: int
    first_divergent_layer: str | None
    """``harness layers``' first divergent layer of the plain fp16 model (None when it was not needed)."""
    trials: int
    """fp16 conversions tried."""
    max_abs_logit: float
    top1_agreement: float
    """The written model's worst logit error and top-1 agreement against fp32."""

    def to_dict(self) -> dict:
        return {"fp32_layers": list(self.fp32_layers), "images": self.images,
                "first_divergent_layer": self.first_divergent_layer, "trials": self.trials,
                "max_abs_logit": finite_or_text(self.max_abs_logit),
                "top1_agreement": self.top1_agreement}


def _logits(path: Path, inputs: np.ndarray, batch: int = 16) -> np.ndarray:
    session = onnx_session(path)
    return np.concatenate([session.run([LOGITS], {INPUT_NAME: inputs[i:i + batch]})[0]
                           for i in range(0, len(inputs), batch)])


def _fp16_run(path: Path, graph: LayerGraph, inputs: np.ndarray, batch: int = 8) -> tuple[np.ndarray, list[str]]:
    """(logits, layers with an Inf or NaN) of an fp16 model, every layer's output read in fp16.

    Why every layer: ONNX Runtime's CPU provider runs an op with no fp16 kernel (Gemm, Mul,
    ...) in fp32 and drops the Casts between two such ops, so an overflow inside a chain of
    them never reaches the logits here, while a strongly typed TensorRT engine, fp16 all the
    way, would carry the Inf on. A marked output is rounded to fp16, so it shows the overflow."""
    execution = OnnxExecution("onnx-fp16", path, graph)
    logits_node = graph.node_of()[LOGITS]
    logits, overflowing = [], set()
    try:
        for i in range(0, len(inputs), batch):
            outputs = execution(inputs[i:i + batch])
            logits.append(outputs[logits_node])
            overflowing |= {n for n, v in outputs.items() if not np.isfinite(v).all()}
    finally:
        execution.close()
    return np.concatenate(logits), sorted(overflowing, key=graph.nodes.index)


def fp16_agrees(reference: np.ndarray, logits: np.ndarray, tolerance: Tolerance) -> tuple[bool, float, float]:
    """(every image within ``tolerance`` with the same top-1, worst |logit error|, top-1 agreement)."""
    ok = all(ARRAYS.judge(r, d, tolerance) for r, d in zip(reference, logits))  # none diverged
    same = reference.argmax(1) == logits.argmax(1)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(logits.astype(np.float64) - reference)
    worst = float(err.max()) if np.isfinite(err).all() else math.inf
    return ok and bool(same.all()), worst, float(same.mean())


def rank_layers(pair: PairResult, consumers: dict[str, list[str]]) -> list[str]:
    """Layers of an fp16-vs-fp32 comparison, worst first: those with NaN/Inf, then the layers
    they feed (an overflowing value must stay fp32 until a later layer scales it back), then
    the rest by relative RMS error; ties in topological order."""
    broken = {r.node for r in pair.rows if r.nan or r.inf}
    fed = {c for n in broken for c in consumers.get(n, ())} - broken
    rows = [r for r in pair.rows if r.rel_rms > 0 or r.node in broken | fed]
    return [r.node for r in sorted(rows, key=lambda r: (r.node not in broken, r.node not in fed, -r.rel_rms, r.depth))]


def _consumers(onnx_path: Path, graph: LayerGraph) -> dict[str, list[str]]:
    """{layer: the layers reading its output}."""
    node_of = graph.node_of()
    consumers: dict[str, list[str]] = {}
    for node in load_onnx(onnx_path).graph.node:
        for tensor in node.input:
            if tensor in node_of:
                consumers.setdefault(node_of[tensor], []).append(node.name)
    return consumers


def find_fp32_fallback(onnx_path: Path, inputs: np.ndarray, out: Path, tolerance: Tolerance,
                       log: Callable[[str], None] = lambda s: None) -> Fallback:
    """Write the fp16 model of ``onnx_path`` to ``out`` with the smallest fp32 fallback for
    which, on every model input of ``inputs`` [N, 3, H, W], the logits are within ``tolerance``
    (the output stage's), top-1 agrees with fp32 and no layer overflows fp16 (see
    :func:`_fp16_run`). Raises :class:`FallbackError` when no fallback is found."""
    reference = _logits(onnx_path, inputs).astype(np.float64)
    graph = LayerGraph.from_onnx(onnx_path)
    trials = 0

    def passes(layers: list[str], path: Path) -> tuple[bool, float, float]:
        nonlocal trials
        trials += 1
        export_fp16(onnx_path, path, layers)
        logits, overflowing = _fp16_run(path, graph, inputs)
        ok, worst, top1 = fp16_agrees(reference, logits, tolerance)
        return ok and not overflowing, worst, top1

    ok, worst, top1 = passes([], out)
    if ok:
        log(f"fp16 agrees with fp32 on all {len(inputs)} images as it is: no layer kept in fp32")
        return Fallback((), len(inputs), None, trials, worst, top1)
    log(f"plain fp16: top-1 agreement {top1:.1%}, worst logit error {worst:.3g} or a layer overflows; ranking the layers")
    with open_executions(["onnx", "onnx-fp16"], onnx_path, graph, out) as executions:
        (pair,), _ = compare_layers(batches_of(((str(i), x) for i, x in enumerate(inputs)), 8), executions, graph,
                                    LayerTolerance())
    ranking = rank_layers(pair, _consumers(onnx_path, graph))
    with tempfile.TemporaryDirectory(prefix="fallback-") as tmp:
        trial = Path(tmp) / "trial.onnx"
        lo, hi = 0, len(ranking)  # invariant: the prefix of hi layers passes (checked), lo fails
        if not passes(ranking, trial)[0]:
            raise FallbackError(f"fp16 disagrees with fp32 even with all {len(ranking)} erring layers in fp32")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if passes(ranking[:mid], trial)[0]:
                hi = mid
            else:
                lo = mid
        keep = ranking[:hi]
        for node in reversed(ranking[:hi]):  # prune: the least erring first
            if len(keep) > 1 and passes([n for n in keep if n != node], trial)[0]:
                keep = [n for n in keep if n != node]
    order = {n: i for i, n in enumerate(graph.nodes)}
    keep = sorted(keep, key=order.__getitem__)
    ok, worst, top1 = passes(keep, out)
    log(f"kept in fp32: {', '.join(keep)} ({trials} conversions tried)")
    return Fallback(tuple(keep), len(inputs), pair.first_divergent_layer, trials, worst, top1)
