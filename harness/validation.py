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


MAX_TIMEOUT = 24 * 3600.0
"""The longest ``--timeout`` taken (a day): beyond that it is a typing mistake."""


MIN_TIMEOUT = 0.1
"""The shortest ``--timeout`` taken: no image's request is answered sooner, and a gRPC deadline
of a few milliseconds crashes the embedded server (Triton 2.51, the nvidia-pytriton wheel: a
request cancelled as it completes, triton-inference-server/server#7368, fixed in 24.12 by #7840;
the production release has the fix, the cpu profile's server does not)."""


def require_timeout(seconds) -> float:
    """``--timeout`` (seconds per request) within [:data:`MIN_TIMEOUT`, :data:`MAX_TIMEOUT`]:
    every command's server group and every :class:`~harness.session.Session` ask this."""
    return require_number("--timeout", seconds, minimum=MIN_TIMEOUT, maximum=MAX_TIMEOUT)
