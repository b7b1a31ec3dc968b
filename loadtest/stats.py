"""Client-side figures of one run, from its samples.

Only successful requests count in QPS and latency: a failed request (a bad payload, a
timeout) is counted as an error of its type and nowhere else.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from loadtest.samples import PHOTO, Sample

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RunStats:
    """What the clients saw during one measurement window."""

    seconds: float
    requests: int
    """Successful requests that finished inside the window."""
    qps: float
    """Successful requests per second."""
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    avg_response_bytes: float
    errors: dict[str, int] = field(default_factory=dict)
    """Failed requests by error type."""
    payloads: dict[str, int] = field(default_factory=dict)
    """All requests (successful or not) by payload kind."""
    failed_photos: int = 0
    """Failed requests that carried a good photo: unexpected errors."""

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        return {
            "seconds": self.seconds, "requests": self.requests, "qps": self.qps,
            "avg_ms": self.avg_ms, "p50_ms": self.p50_ms, "p90_ms": self.p90_ms, "p99_ms": self.p99_ms,
            "max_ms": self.max_ms, "avg_response_bytes": self.avg_response_bytes,
            "errors": dict(self.errors), "payloads": dict(self.payloads), "failed_photos": self.failed_photos,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RunStats":
        return cls(**d)


def summarize(samples: Iterable[Sample], start: float, end: float) -> RunStats:
    """Figures of the samples that finished in [start, end] (seconds, wall clock)."""
    if end <= start:
        raise ValueError(f"empty measurement window [{start}, {end}]")
    inside = [s for s in samples if start <= s.end <= end]
    ok = np.array([s.latency_ms for s in inside if s.ok], dtype=np.float64)
    seconds = end - start
    if ok.size:
        p50, p90, p99 = np.percentile(ok, PERCENTILES)
        avg, worst = float(ok.mean()), float(ok.max())
        size = float(np.mean([s.response_bytes for s in inside if s.ok]))
    else:
        p50 = p90 = p99 = avg = worst = size = math.nan
    return RunStats(
        seconds=seconds,
        requests=int(ok.size),
        qps=ok.size / seconds,
        avg_ms=avg, p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99), max_ms=worst,
        avg_response_bytes=size,
        errors=dict(sorted(Counter(s.error for s in inside if not s.ok).items())),
        payloads=dict(sorted(Counter(s.payload for s in inside).items())),
        failed_photos=sum(1 for s in inside if not s.ok and s.payload == PHOTO),
    )
