"""How far a deployed stage may stray from the reference and still be ``close``: :class:`Tolerance`.

A stage of one image is ``close`` when at most ``max_fraction`` of its elements differ by
more than ``atol + rtol * |reference|``, its mean absolute error is within ``mean_atol`` and,
for probability outputs, the total variation distance within ``max_total_variation``. Which
tolerance each stage gets (the decoder rule, the drift rule, a spec's
overrides) is :mod:`harness.compare.tolerance`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """How far a deployed stage may stray from the reference and still be ``close``."""

    atol: float = 0.0
    rtol: float = 0.0
    max_fraction: float = 0.0
    """Fraction of elements allowed beyond ``atol + rtol * |reference|`` (default: none;
    0.001 makes ``atol`` a bound on the 99.9th percentile of the error)."""
    mean_atol: float | None = None
    """Bound on the mean absolute error (default None: no bound)."""
    max_total_variation: float | None = None
    """Bound on the total variation distance, half the summed absolute error: the probability
    mass that moved (default None: no bound; set for outputs of probabilities)."""

    def allows(self, fraction_over: float, mean_abs: float, total_variation: float | None = None) -> bool:
        """Whether a stage with this fraction beyond the bound, this mean error and (for
        distributions) this total variation distance is close."""
        return (fraction_over <= self.max_fraction and (self.mean_atol is None or mean_abs <= self.mean_atol)
                and (self.max_total_variation is None or total_variation is None
                     or total_variation <= self.max_total_variation))
