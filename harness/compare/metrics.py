"""Error metrics of one stage of one image: small pure functions over numpy arrays.

Conventions: ``reference`` is the training side, ``deployed`` the server's. Image stages
(``decode``, ``resize``, ``crop``) are HWC on the 0-255 scale and get PSNR; tensor stages
(``input``, ``output``) get cosine similarity and SQNR. Everything is computed in float64.
"""

from __future__ import annotations

import math

import numpy as np

from harness.compare.tolerance import Tolerance, Verdict

IMAGE_STAGES = ("decode", "resize", "crop")
HISTOGRAM_EDGES = np.array([0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, np.inf])
"""Bins of the absolute-error histograms: one scale fits pixel levels and tensors."""


def shape_metrics(reference: np.ndarray, deployed: np.ndarray) -> dict | None:
    """None when shapes match, else a metrics dict that says how they differ."""
    if reference.shape == deployed.shape:
        return None
    return {"shape_mismatch": 1.0, "reference_shape": list(reference.shape), "deployed_shape": list(deployed.shape)}


def error_metrics(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance, image: bool) -> dict:
    """Shape check first, then abs/rel error statistics and the fraction beyond tolerance."""
    mismatch = shape_metrics(reference, deployed)
    if mismatch:
        return mismatch
    # 8-bit images are exact in float32 (and big): half the memory and time of float64.
    work = np.float32 if reference.dtype.itemsize == 1 and deployed.dtype.itemsize == 1 else np.float64
    ref = reference.astype(work, copy=False)
    dep = deployed.astype(work, copy=False)
    nonfinite = int(np.count_nonzero(~np.isfinite(ref)) + np.count_nonzero(~np.isfinite(dep)))
    err = np.abs(dep - ref)
    if nonfinite:
        err = np.where(np.isfinite(err), err, np.inf)
    median, p99 = np.quantile(err, [0.5, 0.99]) if err.size else (0.0, 0.0)
    mse = float(np.mean(np.square(err, dtype=np.float64))) if err.size else 0.0
    bound = tolerance.atol + tolerance.rtol * np.abs(ref) if tolerance.rtol else tolerance.atol
    m = {
        "max_abs": float(err.max(initial=0.0)),
        "mean_abs": float(err.mean()) if err.size else 0.0,
        "median_abs": float(median),
        "p99_abs": float(p99),
        "max_rel": float((err / np.maximum(np.abs(ref), 1e-12)).max(initial=0.0)) if not image else float(
            (err / np.maximum(ref, 1.0)).max(initial=0.0)),  # pixels: relative to max(level, 1)
        "rmse": math.sqrt(mse),
        "fraction_over_tolerance": float(np.count_nonzero(err > bound) / err.size) if err.size else 0.0,
        "nonfinite": float(nonfinite),
    }
    if image:
        m["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    else:
        m["cosine"] = cosine(ref, dep)
        signal = float(np.sum(np.square(ref, dtype=np.float64)))
        noise = float(np.sum(np.square(err, dtype=np.float64)))
        m["sqnr_db"] = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)
    return m


def quick_verdict(reference: np.ndarray, deployed: np.ndarray, tolerance: Tolerance) -> tuple[Verdict, float]:
    """(verdict, RMSE) only, for searches that compare many times: RMSE is inf when the
    shapes differ. Same verdict as :func:`verdict` on :func:`error_metrics`."""
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
    return (Verdict.CLOSE if over <= tolerance.max_fraction else Verdict.DIVERGED), rmse


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a.ravel(), b.ravel()) / (na * nb))


def verdict(metrics: dict, tolerance: Tolerance) -> Verdict:
    if metrics.get("shape_mismatch") or metrics.get("nonfinite"):
        return Verdict.DIVERGED
    if metrics["max_abs"] == 0:
        return Verdict.EQUAL
    return Verdict.CLOSE if metrics["fraction_over_tolerance"] <= tolerance.max_fraction else Verdict.DIVERGED


def error_histogram(reference: np.ndarray, deployed: np.ndarray) -> list[int]:
    """Counts of |deployed - reference| in :data:`HISTOGRAM_EDGES` bins (empty if shapes differ)."""
    if reference.shape != deployed.shape:
        return []
    work = np.float32 if reference.dtype.itemsize == 1 and deployed.dtype.itemsize == 1 else np.float64
    err = np.abs(deployed.astype(work) - reference.astype(work))
    counts = np.histogram(np.nan_to_num(err, nan=np.inf), bins=HISTOGRAM_EDGES)[0]
    counts[-1] += int(np.count_nonzero(np.isinf(err) | np.isnan(err)))  # histogram drops inf
    return counts.tolist()


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max()
    e = np.exp(z)
    return e / e.sum()


def topk_metrics(reference_logits: np.ndarray, deployed_logits: np.ndarray, k: int = 5) -> dict:
    """Top-1 agreement, top-k overlap and the change in the reference top-1's probability."""
    ref_p, dep_p = softmax(reference_logits.astype(np.float64)), softmax(deployed_logits.astype(np.float64))
    ref_top, dep_top = np.argsort(-ref_p)[:k], np.argsort(-dep_p)[:k]
    return {
        "top1_agree": float(ref_top[0] == dep_top[0]),
        f"top{k}_overlap": len(set(ref_top) & set(dep_top)) / k,
        "top1_prob_change": float(dep_p[ref_top[0]] - ref_p[ref_top[0]]),
        "reference_top1": int(ref_top[0]),
        "deployed_top1": int(dep_top[0]),
        "reference_top1_prob": float(ref_p[ref_top[0]]),
        "same_order": float(np.array_equal(ref_top, dep_top)),
    }


def topk_verdict(metrics: dict) -> Verdict:
    if metrics["same_order"] and metrics["top1_prob_change"] == 0:
        return Verdict.EQUAL
    return Verdict.CLOSE if metrics["top1_agree"] else Verdict.DIVERGED
