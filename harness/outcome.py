"""What became of one image in a run: compared, or why not. One name for each, used by every
job (check, diagnose, accuracy) and written as its plain value to every file.

A one-sided rejection is a divergence of its own: one side cannot process an image the
other can. ``Outcome`` is a :class:`enum.StrEnum`, so files keep the plain strings.
"""

from __future__ import annotations

import enum
from typing import Sequence


class Side(enum.StrEnum):
    """Who can reject an image."""

    DEPLOYMENT = "deployment"
    """The deployed server."""
    TRAINING = "training"
    """The training reference."""


class Outcome(enum.StrEnum):
    COMPARED = "compared"
    """Both sides processed it; its stages have verdicts (equal, close, diverged)."""
    FAILED = "failed"
    """Neither side could process it, or it could not be read: says nothing about the deployment."""
    REJECTED_BY_DEPLOYMENT = "rejected by deployment"
    """Training processes it, the deployed server does not."""
    REJECTED_BY_TRAINING = "rejected by training"
    """The deployed server answers it, training does not."""
    SKIPPED = "skipped"
    """An entry of the image folder that is not an input (a directory, a FIFO, a link leading
    outside, ...: :mod:`harness.listing`), listed with why, so that every entry is a row."""

    @staticmethod
    def rejected_by(side: "Side | str") -> "Outcome":
        return Outcome(f"rejected by {Side(side)}")

    @property
    def one_sided(self) -> bool:
        """A rejection by one side only (fails a run unless ``--allow-rejected``)."""
        return self in (Outcome.REJECTED_BY_DEPLOYMENT, Outcome.REJECTED_BY_TRAINING)


def outcome_of(reference_failed: bool, deployed_failed: Sequence[bool]) -> Outcome:
    """How an image that failed somewhere is labelled: rejected by deployment when the
    reference processed it and some deployed path did not; rejected by training when the
    reference failed and some deployed path processed it; else failed."""
    if not reference_failed:
        return Outcome.REJECTED_BY_DEPLOYMENT
    return Outcome.REJECTED_BY_TRAINING if not all(deployed_failed) else Outcome.FAILED
