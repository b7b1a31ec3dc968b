"""Per-stage tolerances and verdicts.

A stage of one image is ``equal`` when both sides hold identical values, ``close`` when at
most ``max_fraction`` of the elements differ by more than ``atol + rtol * |reference|``,
and ``diverged`` otherwise (or when the shapes differ). Defaults below; a spec overrides
any of them per stage::

    [tolerances.resize]
    atol = 2
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Mapping

from harness.spec import Preprocess, SpecError
from harness.stage import Stage


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


@dataclass(frozen=True)
class Tolerance:
    """How far a deployed stage may stray from the reference and still be ``close``."""

    atol: float = 0.0
    rtol: float = 0.0
    max_fraction: float = 0.0
    """Fraction of elements allowed beyond ``atol + rtol * |reference|`` (default: none)."""


DEFAULT_TOLERANCES = {
    # nvJPEG's IDCT and colour conversion differ from libjpeg-turbo's by a level or two.
    Stage.DECODE: Tolerance(atol=2),
    # 8-bit resize outputs round: one level is rounding, not a different algorithm.
    Stage.RESIZE: Tolerance(atol=1),
    Stage.CROP: Tolerance(atol=1),
    # "input" defaults to one 8-bit level after normalization, see tolerances_for().
    # Logits: what one-level input noise moves them by on EfficientNet-Lite0 is ~0.1-0.25;
    # a different resize moves them by ~1-2.
    Stage.OUTPUT: Tolerance(atol=0.5),
}


def tolerances_for(p: Preprocess, overrides: Mapping[str, Mapping[str, float]] = {}) -> dict[str, Tolerance]:
    """Defaults (``input``: one pixel level in normalized units) with the spec's overrides."""
    _, std = p.normalize.mean_std_in_pixels()
    tolerances = dict(DEFAULT_TOLERANCES)
    # float32 normalization differs by an ulp or so between libraries: add a hair.
    tolerances[Stage.INPUT] = Tolerance(atol=1.0 / min(std) * 1.001 + 1e-5)
    for stage, values in overrides.items():
        if stage not in tolerances:
            raise SpecError(f"[tolerances.{stage}]: no such stage; stages: {', '.join(tolerances)}")
        try:
            tolerances[stage] = dataclasses.replace(tolerances[stage], **{k: float(v) for k, v in values.items()})
        except TypeError:
            raise SpecError(f"[tolerances.{stage}]: keys are atol, rtol, max_fraction; got {sorted(values)}") from None
    return tolerances
