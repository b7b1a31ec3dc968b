"""One record per request, the error type of a failed one, and the measurement window.

The Locust users only fire Locust's ``request`` event; a listener turns each event into a
:class:`Sample` and hands it to a :class:`WindowRecorder`. Statistics are computed later,
from the samples, by :mod:`loadtest.stats`: the clients know nothing about statistics, and
the figures are exact (Locust's own percentiles are bucketed to ~2 significant digits and
mix failed requests into the response times).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from loadtest.answers import WRONG_ANSWER

PHOTO = "photo"
"""Payload kind of a request carrying an unmodified photo of the corpus."""


@dataclass(frozen=True)
class Sample:
    """One finished request."""

    end: float
    """Wall-clock time (``time.time()``) the response arrived, on the machine that sent it."""
    latency_ms: float
    response_bytes: int
    payload: str
    """:data:`PHOTO` or the kind of bad payload sent (see :mod:`loadtest.payloads`)."""
    error: str | None = None
    """The error type of a failed request (see :func:`error_type`); ``None`` on success."""
    verified: bool | None = False
    """The answer was judged against the photo's answer alone (:mod:`loadtest.answers`); None:
    it was to be, but its photo has no known answer; False: not judged (not an answered photo,
    or ``--no-verify``)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def answered(self) -> bool:
        """The server answered: right, or wrong (a wrong answer costs what a right one does)."""
        return self.error is None or self.error == WRONG_ANSWER

    def as_row(self) -> list:
        """A compact, msgpack/JSON-friendly form (workers send these to the master)."""
        return [self.end, self.latency_ms, self.response_bytes, self.payload, self.error, self.verified]

    @classmethod
    def from_row(cls, row: Sequence) -> "Sample":
        end, latency_ms, response_bytes, payload, error, verified = row
        return cls(float(end), float(latency_ms), int(response_bytes), str(payload), error,
                   None if verified is None else bool(verified))


_ENSEMBLE_PREFIX = re.compile(r"^in ensemble '[^']*', ")
_MAX_TYPE_LENGTH = 48


def error_type(message: str, fallback: str) -> str:
    """The type of an error, for counting errors by type.

    The models of this repository answer a bad request with ``"<type>: <details>"``
    (e.g. ``"truncated JPEG: the file ends after 89960 bytes ..."``), which Triton wraps
    in ``"in ensemble 'classify_dali', ..."``: the type is the text before the first colon.
    Anything else (timeouts, refused connections, ...) is typed by ``fallback``, the
    exception's class or status, because its message varies from request to request.
    """
    reason = _ENSEMBLE_PREFIX.sub("", message.strip())
    head, colon, _ = reason.partition(":")
    head = head.strip()
    if colon and head and len(head) <= _MAX_TYPE_LENGTH:
        return head
    return fallback


class WindowRecorder:
    """Keeps the samples of requests that finish inside one measurement window.

    Outside a window nothing is stored (warm-up and idle time cost no memory). With Locust
    workers the samples arrive late, in the workers' periodic reports; the results are
    *complete* once every worker that was running when the window opened has reported
    at or after the window's end.
    """

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None
        self._samples: list[Sample] = []
        self._waiting_for: set[str] = set()
        self._last_report: dict[str, float] = {}

    def open(self, at: float, sources: Iterable[str] = ()) -> None:
        """Start a new window at time ``at``; ``sources`` are the workers expected to report."""
        self.start, self.end = at, None
        self._samples = []
        self._waiting_for = set(sources)
        self._last_report = {}

    def close(self, at: float) -> None:
        if self.start is None:
            raise RuntimeError("no measurement window is open")
        self.end = at

    def add(self, samples: Iterable[Sample], source: str | None = None, reported_at: float | None = None) -> None:
        """Record samples; ``source`` and ``reported_at`` identify a worker's report."""
        if self.start is not None:
            self._samples.extend(s for s in samples if self._inside(s.end))
        if source is not None and reported_at is not None:
            self._last_report[source] = max(reported_at, self._last_report.get(source, 0.0))

    def _inside(self, t: float) -> bool:
        return t >= self.start and (self.end is None or t <= self.end)

    @property
    def complete(self) -> bool:
        """True once the window is closed and every expected worker has reported after it."""
        if self.end is None:
            return False
        return all(self._last_report.get(source, 0.0) >= self.end for source in self._waiting_for)

    @property
    def missing_sources(self) -> list[str]:
        """Workers whose report after the window's end is still awaited."""
        if self.end is None:
            return sorted(self._waiting_for)
        return sorted(s for s in self._waiting_for if self._last_report.get(s, 0.0) < self.end)

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    def count(self) -> int:
        return len(self._samples)
