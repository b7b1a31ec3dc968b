"""How the harness reads what a user points at and writes what it reports. Standard library only.

- :func:`read_limited`: a file read whole only if it is a regular file of at most ``limit``
  bytes (a spec at ``/dev/zero``, a FIFO or a directory is refused in one line, never read
  without end or waited on);
- :func:`write_atomic` / :func:`atomic_file`: a report is written to a temporary file beside
  it and renamed over it, so a reader never sees half a file, a full disk never leaves one,
  and a symbolic link planted where the report goes is replaced, never written through;
- :func:`strict_json`: JSON that every parser reads (no bare ``NaN`` or ``Infinity``:
  non-finite numbers are the strings ``"nan"``, ``"inf"``, ``"-inf"``; :func:`from_json_safe`
  reads them back).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from pathlib import Path
from typing import IO, Iterator

from harness.errors import HarnessError
from harness.names import path_text


class InputFileError(HarnessError, OSError):
    """A file the user named cannot be read as one: missing, not a regular file, too large.
    ``reason`` says why without the path (for a row that names the file already)."""

    def __init__(self, path, reason: str):
        super().__init__(f"{_text(path)}: {reason}")
        self.reason = reason


def open_regular(path: str | os.PathLike, follow: bool = True) -> int:
    """A read-only descriptor of ``path`` if it is a regular file (opened without blocking:
    a FIFO is refused, not waited on; ``follow=False`` refuses a symbolic link too). The
    caller closes it. Raises :class:`InputFileError` naming the problem (``FileNotFoundError``
    as it is)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise  # as it is: every caller knows it
    except OSError as exc:
        raise InputFileError(path, _reason(exc, follow)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise InputFileError(path, f"not a regular file ({kind_of(info.st_mode)})")
    return fd


def read_limited(path: str | os.PathLike, limit: int, what: str = "file", follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, refused when larger than ``limit`` (read at
    most ``limit + 1`` bytes: a device or a growing file cannot make it read without end)."""
    fd = open_regular(path, follow)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            os.set_blocking(fd, True)
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputFileError(path, _reason(exc, follow)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputFileError(path, f"{what} larger than {limit:,} bytes: refused")
    return data


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for a skipped entry's reason)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "an unknown kind of file"


def _reason(exc: OSError, follow: bool) -> str:
    import errno

    if exc.errno == errno.ELOOP and not follow:
        return "a symbolic link (not followed)"
    return exc.strerror or str(exc)


def _text(path) -> str:
    return path_text(path)


# -- writing -------------------------------------------------------------------------------------

@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """A binary file to write ``path`` with: a new temporary file beside it (created, never
    opened through a link), flushed to disk and renamed over ``path`` when the block ends
    without an exception; removed otherwise (a full disk leaves the old file or none)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (:func:`atomic_file`)."""
    with atomic_file(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# -- strict JSON ---------------------------------------------------------------------------------

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def json_safe(value):
    """``value`` with every non-finite float as a string (``"nan"``, ``"inf"``, ``"-inf"``),
    so that it dumps as strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def from_json_safe(value):
    """The numbers :func:`json_safe` wrote as strings, as floats again (a dict of metrics)."""
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, dict):
        return {k: from_json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_safe(v) for v in value]
    return value


def strict_json(value, **options) -> str:
    """``value`` as strict JSON (:func:`json_safe`; ``allow_nan=False`` proves it)."""
    return json.dumps(json_safe(value), allow_nan=False, **options)
