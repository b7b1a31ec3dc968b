"""Metrics, verdicts and tolerances on arrays whose answers are known."""

import math

import numpy as np
import pytest

from harness.compare.metrics import HISTOGRAM_EDGES, compare_arrays, quick_verdict, topk_metrics, topk_verdict, verdict
from harness.compare.tolerance import tolerances_for
from harness.spec import SpecError
from harness.tolerance import Tolerance
from harness.verdict import Verdict


@pytest.mark.parametrize("shape", [(7, 5, 3), (300, 200, 3), (1, 1, 3)])
def test_the_8bit_fast_path_agrees_with_the_float_path(shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.integers(0, 256, shape).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-3, 4, shape), 0, 255).astype(np.uint8)
    fast, fast_hist = compare_arrays(a, b, Tolerance(atol=1), image=True)
    slow, slow_hist = compare_arrays(a.astype(np.float32), b.astype(np.float32), Tolerance(atol=1), image=True)
    assert fast.keys() == slow.keys()
    for key in fast:
        assert fast[key] == pytest.approx(slow[key], rel=1e-6), key
    assert fast_hist == slow_hist and sum(fast_hist) == a.size


def test_known_values():
    ref = np.zeros((2, 2, 3), np.uint8)
    dep = ref.copy()
    dep[0, 0, 0] = 10
    m, hist = compare_arrays(ref, dep, Tolerance(atol=1), image=True)
    assert m["max_abs"] == 10 and m["mean_abs"] == pytest.approx(10 / 12) and m["median_abs"] == 0
    assert m["rmse"] == pytest.approx(math.sqrt(100 / 12)) and m["fraction_over_tolerance"] == pytest.approx(1 / 12)
    assert m["psnr_db"] == pytest.approx(10 * math.log10(255 ** 2 / (100 / 12)))
    assert hist[0] == 11 and hist[int(np.searchsorted(HISTOGRAM_EDGES, 10, side="right")) - 1] == 1
    assert verdict(m, Tolerance(atol=1)) is Verdict.DIVERGED
    assert verdict(m, Tolerance(atol=1, max_fraction=0.1)) is Verdict.CLOSE
    assert verdict(compare_arrays(ref, ref, Tolerance(), True)[0], Tolerance()) is Verdict.EQUAL


def test_shapes_and_nonfinite_values_diverge():
    m, hist = compare_arrays(np.zeros((4, 4)), np.zeros((4, 5)), Tolerance(atol=1), image=False)
    assert m["shape_mismatch"] and m["deployed_shape"] == [4, 5] and hist == []
    assert verdict(m, Tolerance(atol=1)) is Verdict.DIVERGED
    nan = np.array([1.0, np.nan])
    m, _ = compare_arrays(np.array([1.0, 2.0]), nan, Tolerance(atol=10), image=False)
    assert m["nonfinite"] == 1 and verdict(m, Tolerance(atol=10)) is Verdict.DIVERGED
    assert quick_verdict(np.array([1.0, 2.0]), nan, Tolerance(atol=10)) == (Verdict.DIVERGED, math.inf)


def test_tensor_metrics():
    ref = np.array([1.0, 2.0, 3.0])
    m, _ = compare_arrays(ref, ref * 2, Tolerance(), image=False)
    assert m["cosine"] == pytest.approx(1.0) and m["sqnr_db"] == pytest.approx(0.0) and m["max_rel"] == pytest.approx(1.0)


def test_topk():
    ref = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    same = topk_metrics(ref, ref.copy())
    assert same["top1_agree"] == 1 and same["topk_overlap"] == 1 and topk_verdict(same, 0.5) is Verdict.EQUAL
    swapped = topk_metrics(ref, np.array([4.0, 5.0, 3.0, 2.0, 1.0, 0.0]))
    assert swapped["top1_agree"] == 0 and swapped["deployed_top1"] == 1 and swapped["reference_margin"] == 1.0
    assert topk_verdict(swapped, 0.5) is Verdict.DIVERGED and topk_verdict(swapped, 1.0) is Verdict.TIE
    assert swapped["top1_prob_change"] < 0
    nudged = topk_metrics(ref, ref + np.array([0, 0.1, 0, 0, 0, 0]))
    assert topk_verdict(nudged, 0.5) is Verdict.CLOSE and nudged["reference_margin"] == 0
    assert topk_metrics(ref, ref, k=3)["k"] == 3


def test_tolerances_default_and_override(spec):
    t = tolerances_for(spec.preprocess, {"resize": {"atol": 3}})
    assert t["resize"].atol == 3 and t["decode"].atol == 4 and t["decode"].mean_atol == 1
    assert t["input"].atol == pytest.approx(4 / 128, rel=0.01)  # the crop's 4 levels after (x - 127) / 128
    assert t["input"].mean_atol == pytest.approx(1 / 128, rel=0.01)
    with pytest.raises(SpecError, match="no such stage"):
        tolerances_for(spec.preprocess, {"resise": {"atol": 1}})
    with pytest.raises(SpecError, match="keys are atol, rtol, max_fraction, mean_atol"):
        tolerances_for(spec.preprocess, {"resize": {"tol": 1}})
