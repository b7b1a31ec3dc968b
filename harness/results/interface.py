"""One report interface for every job's result (Polygraphy-style: small typed results).

Every job's result (a check's :class:`~harness.results.CheckReport`, a diagnosis, an accuracy
run, a layer comparison, a repeatability run, a preflight, a load test) exposes the same five
things, whatever else it holds:

- ``job``: the command that made it (``check``, ``diagnose``, ...);
- ``title``: one line naming what was compared;
- ``verdict``: what the job found, in its own terms (a check's worst stage verdict, a
  diagnosis's ``explained``, a preflight's ``passed``), and ``passed``: whether that lets the
  run pass (exit status 0);
- ``cases()``: the :class:`Case` each thing the job decided is (a check's stages, a diagnosis's
  hypotheses, a preflight's rows, a load test's points), each with its :class:`Status` and the
  one-line reason a person needs;
- ``to_dict()``: the plain form (what its JSON file holds).

``passed`` is true exactly when no case failed or errored: a CI system reading only the
cases (JUnit XML, :mod:`harness.report.formats`) comes to the job's own exit status. The
writers of every format read results through this interface only (:mod:`harness.report.formats`).

Imports only the standard library: it is read in the Triton image too (preflight).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence, runtime_checkable

REASON_LIMIT = 400
"""Characters a reason keeps (longer ones end with an ellipsis): one line a person reads."""


class Status(str, enum.Enum):
    """What a case came to, as JUnit says it: a ``str`` enum, so files keep the plain words."""

    PASSED = "passed"
    FAILED = "failed"
    """The job found what its options forbid (a diverged stage, a failed row)."""
    ERROR = "error"
    """The job could not decide it (the run stopped, nothing could be compared)."""
    SKIPPED = "skipped"
    """Not decided, and not a failure: an entry that is not an input, an image both sides
    fail, a hypothesis not pursued, a check that cannot run here."""

    @property
    def fails(self) -> bool:
        return self in (Status.FAILED, Status.ERROR)


_SPACE = re.compile(r"\s+")


def one_line(text: object, limit: int = REASON_LIMIT) -> str:
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters."""
    line = _SPACE.sub(" ", str(text)).strip()
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


@dataclass(frozen=True)
class Case:
    """One thing a job decided: a JUnit test case."""

    name: str
    classname: str
    """What it belongs to (``check.classify_dali``, ``diagnose.round1``): CI groups cases by it."""
    status: Status
    reason: str = ""
    """One line: why it passed, failed or was skipped (made one line here whatever it is given)."""
    details: str = ""
    """More lines, for whoever opens the case (the figures behind the reason)."""
    seconds: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "reason", one_line(self.reason))

    @property
    def fails(self) -> bool:
        return self.status.fails

    def to_dict(self) -> dict:
        out = {"name": self.name, "classname": self.classname, "status": self.status.value, "reason": self.reason}
        if self.details:
            out["details"] = self.details
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out


@runtime_checkable
class JobResult(Protocol):
    """What every job's result exposes (see the module)."""

    job: str

    @property
    def title(self) -> str: ...

    @property
    def verdict(self) -> str: ...

    @property
    def passed(self) -> bool: ...

    def cases(self) -> Sequence[Case]: ...

    def to_dict(self) -> dict: ...


def counts(cases: Iterable[Case]) -> dict[Status, int]:
    """Cases by status, every status present (0 where none)."""
    out = dict.fromkeys(Status, 0)
    for case in cases:
        out[case.status] += 1
    return out


def count_line(cases: Sequence[Case]) -> str:
    """``12 cases: 10 passed, 1 failed, 0 errors, 1 skipped``."""
    n = counts(cases)
    return (f"{len(cases)} cases: {n[Status.PASSED]} passed, {n[Status.FAILED]} failed, {n[Status.ERROR]} errors, "
            f"{n[Status.SKIPPED]} skipped")


def issue_cases(job: str, issues: Iterable, outcome: str | None = None, allow_rejected: bool = False) -> list[Case]:
    """The images a job did not compare (:class:`~harness.results.ImageIssue`: ``image``,
    ``reason``, ``outcome``, or ``outcome`` given for all), one case each under
    ``JOB.OUTCOME``: rejected by one side only fails the run unless ``allow_rejected``;
    failed on both sides (or unreadable) and skipped entries are skipped cases, with the reason."""
    cases = []
    for issue in issues:
        said = str(outcome or getattr(issue, "outcome", None) or "failed")
        one_sided = said.startswith("rejected by")
        why = f"allowed (--allow-rejected): {issue.reason}" if one_sided and allow_rejected else issue.reason
        status = Status.FAILED if one_sided and not allow_rejected else Status.SKIPPED
        cases.append(Case(str(issue.image), f"{job}.{said}", status, f"{said}: {why}"))
    return cases
