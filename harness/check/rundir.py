"""A check's report directory, owned by one run at a time (the layout: docs/run-directory.md).

- ``run.lock``: held with ``flock`` by the run writing here, its PID inside: a second run
  into the same directory is refused naming that PID (the lock dies with its process, so a
  killed run never leaves the directory locked).
- ``run.json``: the :class:`RunManifest`, what the run is (images, deployment, server,
  spec, options, versions); ``--resume`` refuses to continue a run that was something else,
  naming every difference.
- ``images.jsonl``: one :class:`~harness.result.ImageResult` a line in strict JSON,
  each line appended with one ``write`` (a record is whole or, after a crash or a full
  disk, a torn last line that the next ``--resume`` drops and redoes); ``per_image.csv``
  the same rows for spreadsheets, rebuilt from images.jsonl on resume.

Everything else in the directory (report.*, visuals/, tensors/) is written through
:func:`harness.files.atomic_file`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from harness.check.files import CSV_FILENAME, RESULTS_FILENAME, csv_header, csv_row
from harness.errors import UsageError
from harness.files import atomic_file, open_regular, read_limited, strict_json, write_atomic
from harness.names import path_text
from harness.result import ImageResult

LOCK_FILENAME = "run.lock"
MANIFEST_FILENAME = "run.json"
MANIFEST_FORMAT = 1
MAX_MANIFEST_BYTES = 2 ** 20


class RunDirectory:
    """``path`` (created) locked for this run for the ``with`` block; refuses a directory
    another run holds, a file where the directory should be, and a sub-directory that is a
    symbolic link (``visuals``, ``tensors``: written into, never through a link)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock_fd: int | None = None

    def __enter__(self) -> "RunDirectory":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK_FILENAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            raise UsageError(f"--report {path_text(self.path)} is a file, not a directory") from None
        except OSError as exc:
            raise UsageError(f"cannot write the report to {path_text(self.path)}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(f"--report {path_text(self.path)} is in use by another run (PID {holder}): wait for it "
                             "to finish, or give another --report") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock; the file stays (removing it would race a new run)
            self._lock_fd = None

    def subdirectory(self, name: str) -> Path:
        """``path/name``, created; refused if it is a symbolic link or not a directory."""
        sub = self.path / name
        if sub.is_symlink() or (sub.exists() and not sub.is_dir()):
            raise UsageError(f"{path_text(sub)} is not a directory of this run (a link or a file): "
                             "refusing to write through it")
        sub.mkdir(exist_ok=True)
        return sub

    # -- the manifest ------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST_FILENAME

    def read_manifest(self) -> "RunManifest | None":
        if not os.path.lexists(self.manifest_path):
            return None
        try:
            data = json.loads(read_limited(self.manifest_path, MAX_MANIFEST_BYTES, "run manifest", follow=False))
            return RunManifest.from_dict(data)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"--resume: {path_text(self.manifest_path)} cannot be read ({exc}): "
                             "start a new run in another --report") from None

    def write_manifest(self, manifest: "RunManifest") -> None:
        write_atomic(self.manifest_path, strict_json(manifest.to_dict(), indent=1, sort_keys=True) + "\n")

    def has_results(self) -> bool:
        return (self.path / RESULTS_FILENAME).exists()


def existing_report_directory(path: Path):
    """For the jobs that write their report at the end (diagnose, accuracy, layers): ``path``
    as :class:`RunDirectory` takes it (a file or a link there refused in one line, another
    run writing there refused, the lock held) when it exists; nothing when it does not (the
    job creates it when it writes, so a refused job leaves none, and a report folder inside a
    dataset's folder is not there yet when the dataset is listed)."""
    import contextlib

    return RunDirectory(path) if os.path.lexists(path) else contextlib.nullcontext()


def report_locked(job):
    """``job(session, options, ...)`` run with ``options.report`` taken as ``check`` takes it
    (:func:`existing_report_directory`): a file or a link there, or another run writing there,
    is refused in one line before anything runs; an existing folder is locked for the run."""
    import functools

    @functools.wraps(job)
    def run(session, options, *args, **kwargs):
        with existing_report_directory(options.report):
            return job(session, options, *args, **kwargs)

    return run


@dataclass(frozen=True)
class RunManifest:
    """What a run is (``identity``: compared field by field on ``--resume``) and how it ran
    (``settings``: workers, retries, timeout, memory budget; free to change on resume).
    Values are JSON: strings, numbers, booleans, null, lists, objects."""

    command: str
    identity: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"format": MANIFEST_FORMAT, "command": self.command, "identity": self.identity,
                "settings": self.settings}

    @staticmethod
    def from_dict(data: dict) -> "RunManifest":
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"manifest format {data.get('format')!r}, this harness reads {MANIFEST_FORMAT}")
        return RunManifest(str(data["command"]), dict(data["identity"]), dict(data.get("settings", {})))

    def served_by(self, server_version: str | None, deployment: str) -> "RunManifest":
        """This manifest with what is known once connected: the server's version and the
        deployment found on it (identity keys ``served.*``)."""
        served = {"tritonserver": server_version, "deployment": deployment}
        return RunManifest(self.command, {**self.identity, "served": served}, self.settings)

    def differences(self, now: "RunManifest", only_known: bool = False) -> list[str]:
        """``key: earlier -> now`` for every identity field that differs (nested ones by a
        dotted key), plus the command; ``only_known``: only the top-level keys ``now`` has
        (before connecting, the server's are not known yet)."""
        out = [] if self.command == now.command else [f"command: {self.command} -> {now.command}"]
        then = {k: v for k, v in self.identity.items() if k in now.identity} if only_known else self.identity
        return out + _differences(then, now.identity, "")


def _differences(then: dict, now: dict, prefix: str) -> list[str]:
    out = []
    for key in sorted(set(then) | set(now), key=str):
        a, b = then.get(key, "(absent)"), now.get(key, "(absent)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            out.append(f"{prefix}{key}: {_short(a)} -> {_short(b)}")
    return out


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


# -- the results log -----------------------------------------------------------------------------

@dataclass
class Recovered:
    """What reading back images.jsonl found."""

    kept: int = 0
    torn: int = 0
    """Lines that were not a whole record (a torn last line after a crash or a full disk)."""
    duplicates: int = 0
    """Records of an image already recorded later in the file (the last one is kept)."""
    dropped: int = 0
    """Records of entries no longer listed, or listed differently (they are redone)."""

    def describe(self) -> str | None:
        parts = [f"{self.torn} torn or unreadable line(s) dropped" if self.torn else "",
                 f"{self.duplicates} duplicate record(s) dropped" if self.duplicates else "",
                 f"{self.dropped} record(s) of entries no longer listed as they were dropped" if self.dropped else ""]
        parts = [p for p in parts if p]
        return "; ".join(parts) if parts else None


class ResultsLog:
    """images.jsonl and per_image.csv of a run directory, appended one record at a time."""

    def __init__(self, directory: Path, task=None):
        """``task``: names the CSV's result columns (default classification's)."""
        self.directory, self.task = Path(directory), task
        self.results_path, self.csv_path = self.directory / RESULTS_FILENAME, self.directory / CSV_FILENAME
        self._results_fd = self._csv_fd = -1

    def start(self) -> None:
        """A new run: both files written empty (the CSV with its header)."""
        write_atomic(self.results_path, b"")
        write_atomic(self.csv_path, _csv_line(csv_header(self.task)))
        self._open()

    def resume(self, keep: Callable[[ImageResult], bool], on_record: Callable[[ImageResult], None]) -> Recovered:
        """Read back the records of an earlier run: each whole, valid line's result that
        ``keep`` accepts (the last record of an image wins) goes to ``on_record``; both files
        are rewritten with exactly those records (atomically), so a torn line, a duplicate or
        a record ``keep`` refuses is gone and its image redone. Reads the file twice rather
        than holding the records: memory stays flat."""
        recovered, last = Recovered(), {}
        for number, result in self._records(recovered):
            if result.image in last:
                recovered.duplicates += 1
            last[result.image] = number
        with atomic_file(self.results_path) as results, atomic_file(self.csv_path) as table:
            table.write(_csv_line(csv_header(self.task)))
            for number, result in self._records(Recovered()):
                if last.get(result.image) != number:
                    continue
                if not keep(result):
                    recovered.dropped += 1
                    continue
                results.write(_record_line(result))
                table.write(_csv_line(csv_row(result, self.task)))
                recovered.kept += 1
                on_record(result)
        self._open()
        return recovered

    def _records(self, recovered: Recovered) -> Iterator[tuple[int, ImageResult]]:
        with os.fdopen(open_regular(self.results_path, follow=False), "rb") as f:  # never a planted link
            for number, line in enumerate(f):
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("torn")
                    result = ImageResult.from_dict(json.loads(line))
                except (ValueError, TypeError, KeyError, AttributeError):
                    if line.strip():
                        recovered.torn += 1
                    continue
                yield number, result

    def _open(self) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self._results_fd, self._csv_fd = os.open(self.results_path, flags), os.open(self.csv_path, flags)

    def append(self, result: ImageResult) -> None:
        """One record, each file's line in one ``write`` (raises ``OSError``, e.g. ENOSPC)."""
        _write_all(self._results_fd, _record_line(result))
        _write_all(self._csv_fd, _csv_line(csv_row(result, self.task)))

    def close(self) -> None:
        for fd in (self._results_fd, self._csv_fd):
            if fd >= 0:
                os.close(fd)
        self._results_fd = self._csv_fd = -1

    def __enter__(self) -> "ResultsLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _record_line(result: ImageResult) -> bytes:
    return (strict_json(result.to_dict()) + "\n").encode("utf-8")


def _csv_line(row: list) -> bytes:
    buf = io.StringIO()
    csv.writer(buf).writerow(row)
    return buf.getvalue().encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    # One write of the whole line; a short write (a disk filling up) is an error, its torn
    # line the next resume's to drop.
    written = os.write(fd, data)
    if written != len(data):
        import errno

        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (wrote {written} of {len(data)} bytes)")
