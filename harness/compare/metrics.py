"""Error metrics of one stage of one image: small pure functions over numpy arrays.

Conventions: ``reference`` is the training side, ``deployed`` the server's. Image stages
(``decode``, ``resize``, ``crop``) are HWC on the 0-255 scale and get PSNR; tensor stages
(``input``, ``output``) get cosine similarity and SQNR. Everything is computed in float64.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from harness.compare.ties import margin_verdict, reference_margin
from harness.scores import LOGITS, ScoreKind, distribution_metrics
from harness.stage import DEFAULT_TOP_K
from harness.tolerance import Tolerance
from harness.verdict import Verdict

HISTOGRAM_EDGES = np.array([0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, np.inf])
"""Bins of the absolute-error histograms: one scale fits pixel levels and tensors."""


def shape_metrics(reference: np.ndarray, deployed: np.ndarray) -> dict | None:
    """None when shapes match, else a metrics dict that says how they differ."""
    if reference.shape == deployed.shape:
        return None
    return {"shape_mismatch": 1.0, "reference_shape": list(reference.shape), "deployed_shape": list(deployed.shape)}


def compare_arrays(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance,
                   image: bool, distribution: bool = False) -> tuple[dict, list[int]]:
    """(metrics, |error| histogram in :data:`HISTOGRAM_EDGES` bins), from one pass over the
    difference. The histogram is empty when the shapes differ. ``distribution``: the arrays
    are probabilities, also compared as distributions (total variation, Jensen-Shannon)."""
    mismatch = shape_metrics(reference, deployed)
    if mismatch:
        return mismatch, []
    if reference.dtype == np.uint8 and deployed.dtype == np.uint8:
        return _compare_8bit(reference, deployed, tolerance)
    ref = reference.astype(np.float64, copy=False)
    dep = deployed.astype(np.float64, copy=False)
    nonfinite = int(np.count_nonzero(~np.isfinite(ref)) + np.count_nonzero(~np.isfinite(dep)))
    if nonfinite:  # a NaN or Inf anywhere: the stage is broken, no statistic means anything
        worst = {k: math.inf for k in ("max_abs", "mean_abs", "median_abs", "p99_abs", "max_rel", "rmse")}
        quality = {"psnr_db": -math.inf} if image else {"cosine": 0.0, "sqnr_db": -math.inf}
        if distribution:
            quality.update(total_variation=math.inf, js_divergence=math.inf)
        return {**worst, "fraction_over_tolerance": 1.0, "nonfinite": float(nonfinite), **quality}, []
    err = np.abs(dep - ref)
    median, p99 = np.quantile(err, [0.5, 0.99]) if err.size else (0.0, 0.0)
    mse = float(np.mean(np.square(err))) if err.size else 0.0
    bound = tolerance.atol + tolerance.rtol * np.abs(ref) if tolerance.rtol else tolerance.atol
    m = {
        "max_abs": float(err.max(initial=0.0)),
        "mean_abs": float(err.mean()) if err.size else 0.0,
        "median_abs": float(median),
        "p99_abs": float(p99),
        # pixels: relative to max(level, 1), so black pixels do not blow it up
        "max_rel": float((err / (np.maximum(ref, 1.0) if image else np.maximum(np.abs(ref), 1e-12))).max(initial=0.0)),
        "rmse": math.sqrt(mse),
        "fraction_over_tolerance": float(np.count_nonzero(err > bound) / err.size) if err.size else 0.0,
        "nonfinite": float(nonfinite),
    }
    if image:
        m["psnr_db"] = _psnr(mse)
    else:
        m["cosine"] = cosine(ref, dep)
        signal, noise = float(np.sum(np.square(ref))), float(np.sum(np.square(err)))
        m["sqnr_db"] = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)
        if distribution:
            m.update(distribution_metrics(ref, dep))
    histogram = np.bincount(np.searchsorted(HISTOGRAM_EDGES, err.ravel(), side="right") - 1,
                            minlength=len(HISTOGRAM_EDGES) - 1)
    return m, histogram[: len(HISTOGRAM_EDGES) - 1].tolist()


def _compare_8bit(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance) -> tuple[dict, list[int]]:
    # 8-bit images (decoded, resized, cropped): the error is an integer level 0..255, so one
    # histogram of it gives every statistic exactly. OpenCV's SIMD absdiff and calcHist do
    # a decoded megapixel image in a few milliseconds; sorting it would take ten times more.
    err = cv2.absdiff(np.ascontiguousarray(reference), np.ascontiguousarray(deployed)).reshape(-1, 1)
    n = err.size
    counts = cv2.calcHist([err], [0], None, [256], [0, 256]).ravel().astype(np.float64)
    levels = np.arange(256, dtype=np.float64)
    cumulative = np.cumsum(counts)

    def quantile(q: float) -> float:  # the same (linear) interpolation np.quantile uses
        position = q * (n - 1)
        lo = int(np.searchsorted(cumulative, math.floor(position) + 1))
        hi = int(np.searchsorted(cumulative, math.ceil(position) + 1))
        return lo + (hi - lo) * (position - math.floor(position))

    mse = float(counts @ levels ** 2) / n if n else 0.0
    if tolerance.rtol:
        bound = tolerance.atol + tolerance.rtol * reference.reshape(-1, 1).astype(np.float32)
        over = int(np.count_nonzero(err > bound))
    else:
        over = int(counts[levels > tolerance.atol].sum())
    wrong = np.flatnonzero(err)  # relative error only where there is an error (usually few)
    max_rel = float((err.ravel()[wrong] / np.maximum(reference.ravel()[wrong], 1).astype(np.float32)).max(initial=0.0))
    m = {
        "max_abs": float(np.flatnonzero(counts)[-1]) if n else 0.0,
        "mean_abs": float(counts @ levels) / n if n else 0.0,
        "median_abs": quantile(0.5) if n else 0.0,
        "p99_abs": quantile(0.99) if n else 0.0,
        "max_rel": max_rel,
        "rmse": math.sqrt(mse),
        "fraction_over_tolerance": over / n if n else 0.0,
        "nonfinite": 0.0,
        "psnr_db": _psnr(mse),
    }
    bins = np.searchsorted(HISTOGRAM_EDGES, levels, side="right") - 1
    histogram = np.bincount(bins, weights=counts, minlength=len(HISTOGRAM_EDGES) - 1)
    return m, histogram.astype(np.int64).tolist()


def _psnr(mse: float) -> float:
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def quick_verdict(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance) -> tuple[Verdict, float]:
    """(verdict, RMSE) only, for searches that compare many times: RMSE is inf when the
    shapes differ. Same verdict as :func:`verdict` on :func:`compare_arrays`."""
    if reference.shape != deployed.shape:
        return Verdict.DIVERGED, math.inf
    work = np.float32 if reference.dtype.itemsize == 1 and deployed.dtype.itemsize == 1 else np.float64
    err = np.abs(deployed.astype(work) - reference.astype(work))
    if not np.isfinite(err).all():
        return Verdict.DIVERGED, math.inf
    rmse = math.sqrt(float(np.mean(np.square(err, dtype=np.float64)))) if err.size else 0.0
    if not err.size or err.max() == 0:
        return Verdict.EQUAL, rmse
    bound = tolerance.atol + tolerance.rtol * np.abs(reference) if tolerance.rtol else tolerance.atol
    over = np.count_nonzero(err > bound) / err.size
    mean = float(err.mean()) if tolerance.mean_atol is not None else 0.0
    moved = 0.5 * float(err.sum()) if tolerance.max_total_variation is not None else None  # a distribution's mass
    return (Verdict.CLOSE if tolerance.allows(over, mean, moved) else Verdict.DIVERGED), rmse


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    # einsum, not np.dot/np.linalg.norm: those call OpenBLAS, whose own threads make
    # concurrent calls from check's worker threads 60x dearer in CPU (measured: a model
    # input's dot product 0.04 ms alone, 2.5 ms with four threads calling at once).
    a, b = a.ravel(), b.ravel()
    na, nb = math.sqrt(np.einsum("i,i->", a, a)), math.sqrt(np.einsum("i,i->", b, b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.einsum("i,i->", a, b) / (na * nb))


def verdict(metrics: dict, tolerance: Tolerance) -> Verdict:
    if metrics.get("shape_mismatch") or metrics.get("nonfinite"):
        return Verdict.DIVERGED
    if metrics["max_abs"] == 0:
        return Verdict.EQUAL
    allowed = tolerance.allows(metrics["fraction_over_tolerance"], metrics["mean_abs"], metrics.get("total_variation"))
    return Verdict.CLOSE if allowed else Verdict.DIVERGED


def topk_metrics(reference_scores: np.ndarray, deployed_scores: np.ndarray, k: int = DEFAULT_TOP_K,
                 scores: ScoreKind = LOGITS) -> dict:
    """Top-1 agreement, top-k overlap (``topk_overlap``, with ``k``), the change in the reference
    top-1's probability and the largest change among the reference's top-k probabilities
    (``topk_prob_change``), and ``reference_margin``: how far the reference's top-1 score is
    ahead of its score for the deployed top-1, in the units of ``scores`` (0 when they agree).
    Probabilities come from ``scores``: logits by softmax, probabilities as they are."""
    ref_p, dep_p = scores.probabilities(reference_scores), scores.probabilities(deployed_scores)
    ref_top, dep_top = np.argsort(-ref_p)[:k], np.argsort(-dep_p)[:k]
    return {
        "top1_agree": float(ref_top[0] == dep_top[0]),
        "topk_overlap": len(set(ref_top) & set(dep_top)) / len(ref_top),  # k beyond the classes: all of them
        "k": k,
        "top1_prob_change": float(dep_p[ref_top[0]] - ref_p[ref_top[0]]),
        "topk_prob_change": float(np.abs(dep_p[ref_top] - ref_p[ref_top]).max()),
        "reference_top1": int(ref_top[0]),
        "deployed_top1": int(dep_top[0]),
        "reference_top1_prob": float(ref_p[ref_top[0]]),
        "same_order": float(np.array_equal(ref_top, dep_top)),
        "reference_margin": reference_margin(reference_scores, int(dep_top[0])),
    }


def topk_verdict(metrics: dict, tie_margin: float) -> Verdict:
    """``equal`` (same order, same probability), ``close`` (same top-1), ``tie`` (another
    top-1, but the reference's margin is at most ``tie_margin``, in the scores' units: see
    :mod:`harness.compare.ties`) or ``diverged``."""
    if metrics["same_order"] and metrics["top1_prob_change"] == 0:
        return Verdict.EQUAL
    if metrics["top1_agree"]:
        return Verdict.CLOSE
    return margin_verdict(metrics["reference_margin"], tie_margin)
