"""Values a user typed, checked at the edge: the right type, finite, in range. One line
saying which value and what it must be (:class:`harness.errors.UsageError`, exit 2).
Standard library only."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError


def require_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) within ``[minimum, maximum]``."""
    problem = _int_problem(value, minimum, maximum)
    if problem:
        raise UsageError(f"{name} {problem}")
    return value


def require_number(name: str, value, minimum: float | None = None, maximum: float | None = None,
                   above: float | None = None) -> float:
    """``value`` as a float if it is a finite number (not a bool) within ``[minimum, maximum]``
    and greater than ``above``."""
    problem = _number_problem(value, minimum, maximum, above)
    if problem:
        raise UsageError(f"{name} {problem}")
    return float(value)


def _int_problem(value, minimum, maximum) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be a whole number, got {value!r}"
    return _range_problem(value, minimum, maximum)


def _number_problem(value, minimum, maximum, above) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if above is not None and not value > above:
        return f"must be more than {above:g}, got {value!r}"
    return _range_problem(value, minimum, maximum)


def _range_problem(value, minimum, maximum) -> str | None:
    if minimum is not None and value < minimum:
        return f"must be at least {minimum}, got {value!r}"
    if maximum is not None and value > maximum:
        return f"must be at most {maximum}, got {value!r}"
    return None


@dataclass(frozen=True)
class Whole:
    """An option's ``type=``: a whole number within ``[minimum, maximum]`` (the same rule as
    :func:`require_int`), refused while parsing in one line (argparse names the option)."""

    minimum: int
    maximum: int

    def __call__(self, text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        problem = _int_problem(value, self.minimum, self.maximum)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value


@dataclass(frozen=True)
class Number:
    """An option's ``type=``: a finite number within ``[minimum, maximum]`` and more than
    ``above`` (the same rule as :func:`require_number`): ``nan``, ``inf`` and ``1e308`` are
    refused while parsing, never handed to a sleep or a loop."""

    minimum: float | None
    maximum: float
    above: float | None = None

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        problem = _number_problem(value, self.minimum, self.maximum, self.above)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value


LARGEST = 1e12
"""The largest margin, ratio or threshold an option takes: beyond any score, and far from where
arithmetic on it overflows (``1e308``)."""
PORT = Whole(1, 65535)
"""A TCP port."""
COUNT = Whole(1, 2 ** 31 - 1)
"""How many of something (images, rounds, classes, epochs, MiB): at least one."""
THREADS = Whole(1, 256)
"""Threads or processes at work at once: more is a typing mistake, not a machine."""
FRACTION = Number(0.0, 1.0)
"""A share, 0 to 1."""
SEED = Whole(0, 2 ** 32 - 1)
"""A random seed, as numpy takes one."""


NAME_MAX, PATH_MAX = 255, 4096
"""The longest file name and path Linux takes, in bytes: longer ones make every ``exists()`` and
``is_dir()`` raise OSError (ENAMETOOLONG) wherever the path is first looked at."""


def user_path(text: str) -> Path:
    """Every ``type=Path`` option's value (:class:`harness.arguments.ArgumentParser` registers it
    for ``Path``): refused while parsing when it is empty (it would mean the current folder) or
    longer than the system takes, in one line naming the option."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (for the current folder, give .)")
    encoded = os.fsencode(text)
    if len(encoded) >= PATH_MAX or any(len(part) > NAME_MAX for part in encoded.split(b"/")):
        raise argparse.ArgumentTypeError(f"a path longer than the system takes ({NAME_MAX} bytes a name, "
                                         f"{PATH_MAX - 1} in all): {text[:60]!r}...")
    return Path(text)


MAX_TIMEOUT = 24 * 3600.0
"""The longest ``--timeout`` taken (a day): beyond that it is a typing mistake."""


MIN_TIMEOUT = 0.1
"""The shortest ``--timeout`` taken: no image's request is answered sooner, and a gRPC deadline
of a few milliseconds crashes the embedded server (Triton 2.51, the nvidia-pytriton wheel: a
request cancelled as it completes, triton-inference-server/server#7368, fixed in 24.12 by #7840;
the production release has the fix, the cpu profile's server does not)."""


TIMEOUT = Number(MIN_TIMEOUT, MAX_TIMEOUT)
"""``--timeout``'s type: the same bounds, refused while parsing."""
SECONDS = Number(0.0, MAX_TIMEOUT)
"""A duration of a run's phase (a warm-up): 0 to a day."""


def require_timeout(seconds) -> float:
    """``--timeout`` (seconds per request) within [:data:`MIN_TIMEOUT`, :data:`MAX_TIMEOUT`]:
    every command's server group and every :class:`~harness.session.Session` ask this."""
    return require_number("--timeout", seconds, minimum=MIN_TIMEOUT, maximum=MAX_TIMEOUT)
