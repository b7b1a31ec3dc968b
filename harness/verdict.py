"""What a comparison of one stage of one image says: :class:`Verdict`.

A stage is ``equal`` when both sides hold identical values, ``close`` when they differ
within its :class:`~harness.tolerance.Tolerance`, and ``diverged`` otherwise (or when the
shapes differ, or a value is not finite). The rules that pick each stage's tolerance are in
:mod:`harness.compare.tolerance`. ``Verdict`` is a ``str`` enum, so files keep the plain
strings.
"""

from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    EQUAL = "equal"
    CLOSE = "close"
    TIE = "tie"
    """``topk`` only: the top-1 class changed, but within what the output's error explains
    (see :mod:`harness.compare.ties`). Not a divergence; fails a run only with
    ``--fail-on tie`` (or ``close``)."""
    DIVERGED = "diverged"

    @property
    def rank(self) -> int:
        return ("equal", "close", "tie", "diverged").index(self.value)

    @staticmethod
    def worst(verdicts) -> "Verdict":
        return max(verdicts, key=lambda v: v.rank, default=Verdict.EQUAL)


FAIL_ON = ("diverged", "tie", "close")
"""``--fail-on``'s choices, the same in every command: a run fails on a verdict this or worse."""


def ties_fail(fail_on: str) -> bool:
    """Does ``--fail-on fail_on`` fail a run on a tie: ``tie`` or ``close`` (a command that
    compares predictions, not tensors, cannot tell a close from an equal: there ``close`` fails
    on what ``tie`` fails on)."""
    return Verdict(fail_on).rank <= Verdict.TIE.rank
