"""Client-side figures of one run, from its samples.

Only answered requests count in QPS and latency: a failed request (a bad payload, a
timeout) is counted as an error of its type and nowhere else. A wrong answer was answered (it
cost the server what a right one does): it counts in QPS and latency, and as an error of type
``wrong answer`` (and in ``wrong_answers``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from loadtest.answers import WRONG_ANSWER
from loadtest.samples import PHOTO, Sample

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RunStats:
    """What the clients saw during one measurement window."""

    seconds: float
    requests: int
    """Answered requests that finished inside the window (wrong answers included)."""
    qps: float
    """Answered requests per second."""
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
    """Failed requests that carried a good photo: unexpected errors and wrong answers."""
    wrong_answers: int = 0
    """Answers that differ from the photo's answer alone (:mod:`loadtest.answers`)."""
    verified: int = 0
    """Answers judged against the photo's answer alone."""
    unverified: int = 0
    """Answers to a photo with no known answer to judge them by (not counted with ``--no-verify``)."""

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        return {
            "seconds": self.seconds, "requests": self.requests, "qps": self.qps,
            "avg_ms": self.avg_ms, "p50_ms": self.p50_ms, "p90_ms": self.p90_ms, "p99_ms": self.p99_ms,
            "max_ms": self.max_ms, "avg_response_bytes": self.avg_response_bytes,
            "errors": dict(self.errors), "payloads": dict(self.payloads), "failed_photos": self.failed_photos,
            "wrong_answers": self.wrong_answers, "verified": self.verified, "unverified": self.unverified,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RunStats":
        return cls(**d)


def summarize(samples: Iterable[Sample], start: float, end: float) -> RunStats:
    """Figures of the samples that finished in [start, end] (seconds, wall clock)."""
    if end <= start:
        raise ValueError(f"empty measurement window [{start}, {end}]")
    inside = [s for s in samples if start <= s.end <= end]
    ok = np.array([s.latency_ms for s in inside if s.answered], dtype=np.float64)
    seconds = end - start
    if ok.size:
        p50, p90, p99 = np.percentile(ok, PERCENTILES)
        avg, worst = float(ok.mean()), float(ok.max())
        size = float(np.mean([s.response_bytes for s in inside if s.answered]))
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
        wrong_answers=sum(1 for s in inside if s.error == WRONG_ANSWER),
        verified=sum(1 for s in inside if s.verified),
        unverified=sum(1 for s in inside if s.answered and s.payload == PHOTO and s.verified is None),
    )
