"""What a sweep found, apart from how it ran (:mod:`loadtest.sweep`) and how it is written
(:mod:`loadtest.report`): each point's result and the whole :class:`SweepResult`, the job
result every report format reads (:mod:`harness.results.interface`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared
from harness.results.interface import Case, Status
from loadtest.metrics import ModelBreakdown
from loadtest.stats import RunStats

BASELINE = "classify_opencv"
"""CPU decode: what the improvement is measured against."""
CANDIDATE = "classify_dali"
"""GPU decode (in the cpu profile: DALI's CPU decoder)."""


def compared_pair(results) -> tuple[str, str | None]:
    """(candidate, baseline): the first two models of the sweep, in its order (the default
    sweep's order puts :data:`CANDIDATE` first); baseline None with a single model."""
    models = list(dict.fromkeys(r.point.ensemble for r in results))
    return (models[0] if models else CANDIDATE), (models[1] if len(models) > 1 else None)



@dataclass(frozen=True)
class Point:
    """One run of the sweep."""

    protocol: str
    ensemble: str
    clients: int


@dataclass(frozen=True)
class PointResult:
    point: Point
    stats: RunStats
    breakdown: tuple[ModelBreakdown, ...]
    """The ensemble, then each model it runs."""

    def to_dict(self) -> dict:
        return {"protocol": self.point.protocol, "ensemble": self.point.ensemble, "clients": self.point.clients,
                "stats": self.stats.to_dict(), "breakdown": [b.to_dict() for b in self.breakdown]}

    @classmethod
    def from_dict(cls, d: dict) -> "PointResult":
        return cls(Point(d["protocol"], d["ensemble"], d["clients"]), RunStats.from_dict(d["stats"]),
                   tuple(ModelBreakdown.from_dict(b) for b in d["breakdown"]))

    @property
    def problem(self) -> str | None:
        """Why this point fails the sweep, or None: nothing answered, a wrong answer, a good photo
        that failed, or answers that were not verified (a run that checked nothing does not pass)."""
        s = self.stats
        errors = ", ".join(f"{kind} {n}" for kind, n in s.errors.items()) or "none"
        if s.requests == 0:
            return f"no successful request (errors: {errors})"
        if s.wrong_answers:
            return f"{s.wrong_answers} wrong answers of {s.verified} verified (errors: {errors})"
        if s.failed_photos:
            return f"{s.failed_photos} good photos failed (errors: {errors})"
        if s.unverified:
            return f"{s.unverified} answers not verified: no known answer for their photo"
        return None

    @property
    def avg_batch(self) -> float:
        """The largest average batch size among the models the ensemble runs (where a
        batch-dependent fault acts); NaN when none executed."""
        sizes = [b.avg_batch for b in self.breakdown[1:] or self.breakdown if b.avg_batch == b.avg_batch]
        return max(sizes, default=float("nan"))


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep whose reports are written."""

    results: list[PointResult]
    paths: list[Path]
    """The files written in ``--out``."""
    meta: dict

    def findings(self) -> list[str]:
        """Each point that fails the run, in words (rich markup): :attr:`PointResult.problem`."""
        return [f"{r.point.protocol} {r.point.ensemble} x{r.point.clients}: [bold red]{r.problem}[/]"
                for r in self.results if r.problem]

    # -- the report interface (harness.results.interface) --

    job = "loadtest"

    @property
    def title(self) -> str:
        candidate, baseline = compared_pair(self.results)
        return f"Load test: {candidate} vs {baseline}" if baseline else f"Load test: {candidate}"

    @property
    def verdict(self) -> str:
        """``served`` (every point measured, every good photo served its known answer),
        ``failed`` (a point with a :attr:`PointResult.problem`) or ``nothing measured``."""
        if not any(r.stats.requests for r in self.results):
            return "nothing measured"
        return "failed" if self.findings() else "served"

    @property
    def passed(self) -> bool:
        return self.verdict == "served"

    def cases(self) -> list[Case]:
        """One case per point: failed with its :attr:`PointResult.problem` (bad payloads of
        ``--bad-fraction`` failing are expected); passed with its QPS and latency; an error when
        no point measured anything."""
        cases = []
        for r in self.results:
            s, errors = r.stats, ", ".join(f"{kind} {n}" for kind, n in r.stats.errors.items()) or "none"
            if r.problem:
                status, reason = Status.FAILED, r.problem
            else:
                status, reason = Status.PASSED, (f"{s.qps:.1f} QPS, TP50 {s.p50_ms:.1f} ms, TP99 {s.p99_ms:.1f} ms, "
                                                 f"{s.requests} requests ({s.verified} verified), errors: {errors}")
            cases.append(Case(f"{r.point.ensemble} x{r.point.clients}", f"loadtest.{r.point.protocol}", status, reason,
                              seconds=s.seconds))
        if self.results and not any(r.stats.requests for r in self.results):
            cases.append(Case("sweep", "loadtest", Status.ERROR, f"no successful request in any of the "
                                                                 f"{len(self.results)} points: nothing was measured"))
        return cases

    def to_dict(self) -> dict:
        """What results.json holds: the sweep's context and every point."""
        return {**self.meta, "points": [r.to_dict() for r in self.results]}

    def exit_status(self) -> int:
        """0 nothing found, 1 :meth:`findings`; raises :class:`~harness.errors.NothingCompared`
        (status 2) when no point had a successful request: the sweep measured nothing."""
        if not any(r.stats.requests for r in self.results):
            raise NothingCompared(f"no successful request in any of the {len(self.results)} points: nothing was "
                                  "measured (the reports say which errors the requests met)")
        return EXIT_FOUND if self.findings() else EXIT_OK
