"""Client-side figures: failed requests never enter a success figure."""

import math

import numpy as np
import pytest

from loadtest.samples import PHOTO, Sample
from loadtest.stats import summarize


def test_figures_of_successes_only():
    ok = [Sample(10.0 + i * 0.01, latency_ms=float(i + 1), response_bytes=200, payload=PHOTO) for i in range(100)]
    # Failures with huge latencies: they must not move QPS, percentiles, average or size.
    failed = [Sample(10.5, 9999.0, 0, "truncated", "truncated JPEG"), Sample(10.6, 8888.0, 0, "not_an_image",
                                                                          "not an image"),
              Sample(10.7, 7777.0, 0, "truncated", "truncated JPEG")]
    stats = summarize(ok + failed, start=10.0, end=12.0)
    latencies = np.arange(1, 101, dtype=float)
    assert stats.requests == 100
    assert stats.qps == pytest.approx(100 / 2.0)
    assert stats.avg_ms == pytest.approx(latencies.mean())
    assert (stats.p50_ms, stats.p90_ms, stats.p99_ms) == pytest.approx(tuple(np.percentile(latencies, [50, 90, 99])))
    assert stats.max_ms == 100.0 and stats.avg_response_bytes == 200.0
    assert stats.errors == {"not an image": 1, "truncated JPEG": 2} and stats.error_count == 3
    assert stats.payloads == {PHOTO: 100, "not_an_image": 1, "truncated": 2}
    assert stats.failed_photos == 0


def test_a_failed_photo_is_an_unexpected_error():
    samples = [Sample(1.0, 5.0, 10, PHOTO), Sample(1.1, 60000.0, 0, PHOTO, "StatusCode.DEADLINE_EXCEEDED")]
    stats = summarize(samples, 0.0, 2.0)
    assert stats.failed_photos == 1 and stats.requests == 1 and stats.max_ms == 5.0


def test_only_the_window_counts():
    samples = [Sample(t, 5.0, 1, PHOTO) for t in (0.5, 1.0, 1.5, 2.0, 2.5)]
    stats = summarize(samples, start=1.0, end=2.0)
    assert stats.requests == 3 and stats.qps == 3.0


def test_a_window_of_failures_only_has_no_latency():
    stats = summarize([Sample(1.0, 5.0, 0, "truncated", "truncated JPEG")], 0.0, 2.0)
    assert stats.requests == 0 and stats.qps == 0.0 and math.isnan(stats.p50_ms)
    assert stats.errors == {"truncated JPEG": 1}


def test_round_trip_and_bad_window():
    stats = summarize([Sample(1.0, 5.0, 10, PHOTO)], 0.0, 2.0)
    assert type(stats).from_dict(stats.to_dict()) == stats
    with pytest.raises(ValueError):
        summarize([], 2.0, 2.0)
