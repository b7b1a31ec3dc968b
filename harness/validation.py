"""Values a user typed, checked at the edge: the right type, finite, in range. One line
saying which value and what it must be (:class:`harness.errors.UsageError`, exit 2).
Standard library only."""

from __future__ import annotations

import math

from harness.errors import UsageError


def require_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, got {value!r}")
    _require_range(name, value, minimum, maximum)
    return value


def require_number(name: str, value, minimum: float | None = None, maximum: float | None = None,
                   above: float | None = None) -> float:
    """``value`` as a float if it is a finite number (not a bool) within ``[minimum, maximum]``
    and greater than ``above``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    if above is not None and not value > above:
        raise UsageError(f"{name} must be more than {above:g}, got {value!r}")
    _require_range(name, value, minimum, maximum)
    return float(value)


def _require_range(name: str, value, minimum, maximum) -> None:
    if minimum is not None and value < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise UsageError(f"{name} must be at most {maximum}, got {value!r}")
