"""The per-layer statistics of harness.layers.compare against their float64 definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.layers.compare import LayerTolerance, _Running
from harness.verdict import Verdict


def _batch(dtype, seed: int = 0, n: int = 3, shape=(8, 20, 20)):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((n, *shape)).astype(np.float32) * np.float32(30)
    other = (ref + rng.standard_normal(ref.shape).astype(np.float32) * np.float32(0.05)).astype(dtype)
    return ref, other


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_statistics_are_their_float64_definitions(dtype):
    names = ["a", "b", "c"]
    running = _Running()
    batches = [_batch(dtype, seed) for seed in (1, 2)]
    for ref, other in batches:
        running.add(ref, other, names)
    row = running.row("node", "Conv", 0, LayerTolerance())

    diffs = [other.astype(np.float64) - ref.astype(np.float64) for ref, other in batches]
    flat = [(r.reshape(3, -1).astype(np.float64), d.reshape(3, -1)) for (r, _), d in zip(batches, diffs)]
    rel = [np.sqrt((d * d).sum(1) / (r * r).sum(1)) for r, d in flat]
    cos = [((r * (r + d)).sum(1)) / np.sqrt((r * r).sum(1) * ((r + d) ** 2).sum(1)) for r, d in flat]
    assert row.max_abs == pytest.approx(max(np.abs(d).max() for d in diffs), rel=1e-6)
    assert row.mean_abs == pytest.approx(sum(np.abs(d).sum() for d in diffs) / sum(d.size for d in diffs), rel=1e-4)
    assert row.rel_rms == pytest.approx(max(r.max() for r in rel), rel=1e-4)
    assert row.cosine == pytest.approx(min(c.min() for c in cos), abs=1e-6)
    worst_batch = int(np.argmax([r.max() for r in rel]))
    assert row.worst_image == names[int(np.argmax(rel[worst_batch]))]
    assert row.verdict is Verdict.CLOSE and row.nan == row.inf == 0


def test_a_negative_extreme_is_the_largest_error():
    """max |error| is taken by magnitude (BLAS isamax), not the largest signed value."""
    ref = np.zeros((1, 5), np.float32) + 1
    other = np.array([[1.5, 1, -3, 1, 1]], np.float32)
    running = _Running()
    running.add(ref, other, ["x"])
    assert running.row("n", "Add", 0, LayerTolerance()).max_abs == 4.0


def test_overflow_is_counted_and_diverges():
    ref, other = _batch(np.float16)
    other[1, 0, 0, :3] = [np.inf, -np.inf, np.nan]
    running = _Running()
    running.add(ref, other, ["a", "b", "c"])
    row = running.row("n", "Gemm", 4, LayerTolerance())
    assert (row.inf, row.nan, row.worst_image) == (2, 1, "b")
    assert row.verdict is Verdict.DIVERGED and math.isinf(row.rel_rms)


def test_identical_outputs_are_equal():
    ref, _ = _batch(np.float32)
    running = _Running()
    running.add(ref, ref.copy(), ["a", "b", "c"])
    row = running.row("n", "Conv", 0, LayerTolerance())
    assert row.verdict is Verdict.EQUAL and row.max_abs == row.rel_rms == 0.0 and row.cosine == pytest.approx(1.0)
