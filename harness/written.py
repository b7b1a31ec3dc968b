"""A folder the harness wrote (a deployment, a profile of a repository): what it may replace.

Nothing the harness did not write is ever removed. Each folder it writes holds its record,
:data:`RECORD_FILENAME`: every folder, file (with its sha256) and symbolic link (with its target)
it wrote there. :func:`replacing` writes a new folder in its place only when the old one holds
nothing else, unchanged since: any other file is refused in one line naming it, before anything
is written. The new folder is built beside the old one and renamed into its place only when
whole, so a failure at any point leaves the old one as it was. Standard library only.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from harness.errors import HarnessError
from harness.files import open_regular, read_limited, write_atomic
from harness.names import path_text
from harness.paths import DEFAULT_REPOSITORY, TEMPLATE_REPOSITORY

RECORD_FILENAME = ".harness-written.json"
"""The record of what the harness wrote in a folder (hidden: Triton reads only model folders)."""
RECORD_LIMIT = 64 * 2**20
"""The largest record read (a deployment's is a few kB)."""


class FolderRefused(HarnessError, OSError):
    """A folder the harness will not write or replace: it holds what the harness did not write,
    or it is inside this project's repository or another folder the harness wrote."""


@dataclass(frozen=True)
class Entry:
    """One thing in a folder as found on disk: its kind, and what tells a change (size and time)."""

    kind: str
    """``folder``, ``file``, ``link`` or ``other`` (a FIFO, a socket, a device)."""
    size: int
    modified_ns: int


@dataclass(frozen=True)
class Record:
    """What the harness wrote in a folder (:data:`RECORD_FILENAME`)."""

    writer: str
    """The command that wrote it (``harness deploy``)."""
    folders: frozenset[str]
    files: Mapping[str, str]
    """Path (relative, ``/``-separated) -> sha256 of the bytes written."""
    links: Mapping[str, str]
    """Path -> the link's target as written."""

    def to_json(self) -> str:
        return json.dumps({"written_by": self.writer, "folders": sorted(self.folders), "files": dict(sorted(self.files.items())),
                           "links": dict(sorted(self.links.items()))}, indent=1) + "\n"


@dataclass(frozen=True)
class Replacement:
    """Where a command writes (``folder``, new and empty) and what it replaces when done (``out``)."""

    out: Path
    """The folder written, resolved (``--out`` a symbolic link: its target)."""
    folder: Path
    """The new folder to write into, beside ``out``."""


@dataclass(frozen=True)
class Replaceable:
    """A folder proven replaceable: where it is, and what it held when proven (None: nothing there)."""

    out: Path
    """Resolved (a symbolic link followed)."""
    entries: Mapping[str, Entry] | None


def replaceable(out: Path, protected: Mapping[Path, str] | None = None) -> Replaceable:
    """``out`` (an ``--out``) proven to be a folder the harness may write: one it wrote, unchanged
    and holding nothing else, an empty one or none; not inside (or holding) this project's
    repository, a path of ``protected`` (path -> what it is, in words) or another folder the
    harness wrote. Else :class:`FolderRefused`, one line naming the file or the place."""
    target = _resolved(out)
    _refuse_place(out, target, protected or {})
    return Replaceable(target, verified(target, out))


@contextlib.contextmanager
def replacing(out: Path, writer: str, protected: Mapping[Path, str] | None = None) -> Iterator[Replacement]:
    """A new folder to write ``out`` into, put in ``out``'s place when the block ends without an
    exception (its record written first), and removed otherwise. Refused before the block runs
    where :func:`replaceable` refuses. ``writer`` is the command, for the record."""
    proven = replaceable(out, protected)
    target, before = proven.out, proven.entries
    staging = target.parent / f".{target.name[:200]}.harness-{secrets.token_hex(4)}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir(0o700)
    except OSError as exc:
        raise FolderRefused(f"{path_text(out)}: cannot write beside it, in {path_text(target.parent)}: "
                            f"{exc.strerror or exc}") from None
    folder, aside = staging / "new", staging / "old"
    try:
        folder.mkdir()  # the process's umask, as any folder it writes: a container's server reads it
        yield Replacement(target, folder)
        write_atomic(folder / RECORD_FILENAME, record_of(folder, writer).to_json())
        if before is not None:
            os.rename(target, aside)
            if _entries(aside) != before:  # written to since it was verified: put back as it is
                _put_back(aside, target)
                raise FolderRefused(f"{path_text(out)}: changed while the harness was writing its replacement: left as it is")
        try:
            os.rename(folder, target)
        except OSError as exc:
            if before is not None:
                _put_back(aside, target)
            raise FolderRefused(f"{path_text(out)}: cannot be replaced: {exc.strerror or exc}") from None
    except BaseException:
        if not aside.exists():  # never remove the old folder while it waits aside
            shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging)  # the new folder in place; the old one, verified, goes


def _put_back(aside: Path, target: Path) -> None:
    try:
        os.rename(aside, target)
    except OSError as exc:
        raise FolderRefused(f"{path_text(target)}: could not be put back ({exc.strerror or exc}): it is whole, in "
                            f"{path_text(aside)}") from None


def _resolved(out: Path) -> Path:
    """``out`` with every symbolic link followed: a link to an earlier deployment is that folder."""
    try:
        target = Path(out).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise FolderRefused(f"{path_text(out)}: cannot be resolved: {exc}") from None
    if os.path.islink(out) and not target.exists():  # never a folder made where a stale link points
        raise FolderRefused(f"{path_text(out)}: a symbolic link to {path_text(target)}, which does not exist")
    return target


def _refuse_place(out: Path, target: Path, protected: Mapping[Path, str]) -> None:
    """``target`` is neither inside nor around this project's repository or a ``protected`` folder, nor inside
    a folder the harness wrote (whose record would not list it: that folder could not be replaced again)."""
    own = {TEMPLATE_REPOSITORY: "the harness's own templates", DEFAULT_REPOSITORY: "this project's own model repository"}
    for place, what in (*own.items(), *protected.items()):
        place = Path(place).resolve()
        if target == place:
            raise FolderRefused(f"{path_text(out)}: that is {what}: give another folder")
        if place in target.parents:
            raise FolderRefused(f"{path_text(out)}: inside {path_text(place)}, {what}: give a folder outside it")
        if target in place.parents:
            raise FolderRefused(f"{path_text(out)}: holds {path_text(place)}, {what}: give another folder")
    here = Path.cwd().resolve()
    if here == target or target in here.parents:  # set aside with it, this process would work in a removed folder
        raise FolderRefused(f"{path_text(out)}: holds the working folder ({path_text(here)}): give another folder")
    for parent in target.parents:
        if (parent / RECORD_FILENAME).is_file():
            raise FolderRefused(f"{path_text(out)}: inside {path_text(parent)}, a folder the harness wrote: give a folder "
                                "outside it")


def verified(target: Path, out: Path | None = None) -> dict[str, Entry] | None:
    """What ``target`` holds (None: nothing there), once proven to be only what the harness wrote
    there, unchanged: else :class:`FolderRefused` naming the first thing it did not write or that
    changed. ``out`` is how the user named it (for the message)."""
    name = path_text(out if out is not None else target)
    if not os.path.lexists(target):
        return None
    if not target.is_dir():
        raise FolderRefused(f"{name}: a file, not a folder")
    top = sorted(entry for entry in os.listdir(target) if entry != RECORD_FILENAME)
    if not top:
        return {}
    record = _read_record(target, name)
    if record is None:  # refused at its first name: a home folder is not walked
        raise FolderRefused(f"{name}: holds {top[0]}, which the harness did not write (no record of what it wrote there, "
                            f"{RECORD_FILENAME}): nothing was changed; give a new or empty folder")
    entries = _entries(target, record, name)  # what it did not write, refused first: cheap, and the likeliest
    for path, digest in sorted(record.files.items()):
        if path in entries and sha256_of(target / path) != digest:
            raise FolderRefused(f"{name}: {path} changed since {record.writer} wrote it: nothing was changed; move it "
                                "out or give another folder")
    for path, link in sorted(record.links.items()):
        if path in entries and os.readlink(target / path) != link:
            raise FolderRefused(f"{name}: {path} points elsewhere than {record.writer} wrote it: nothing was changed")
    return entries


def _recorded(record: Record, path: str, kind: str) -> bool:
    if kind == "folder" and path in record.folders:
        return True
    if kind == "file" and path in record.files:
        return True
    if kind == "link" and path in record.links:
        return True
    return _is_bytecode_of(record, path, kind)


def _is_bytecode_of(record: Record, path: str, kind: str) -> bool:
    """A ``__pycache__`` folder beside a recorded ``.py``, or its compiled ``NAME.TAG.pyc``: Python
    writes them when a model's code is imported (Triton's Python backend, a DALI pipeline's
    definition read); they are made again from the recorded source, so nothing is lost."""
    parent, _, leaf = path.rpartition("/")
    if kind == "folder" and leaf == "__pycache__":
        return any(p.rpartition("/")[0] == parent and p.endswith(".py") for p in record.files)
    grandparent, _, cache = parent.rpartition("/")
    if kind != "file" or cache != "__pycache__" or not leaf.endswith(".pyc") or leaf.count(".") < 2:
        return False
    source = leaf.split(".")[0] + ".py"
    return (f"{grandparent}/{source}" if grandparent else source) in record.files


def _read_record(folder: Path, name: str) -> Record | None:
    path = folder / RECORD_FILENAME
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_limited(path, RECORD_LIMIT, "record", follow=False))
        files, links, folders = data["files"], data["links"], data["folders"]
        if not (isinstance(data["written_by"], str) and all(isinstance(k, str) and isinstance(v, str)
                                                            for k, v in (*files.items(), *links.items()))
                and all(isinstance(f, str) for f in folders)):
            raise TypeError("a value of another type")
    except (HarnessError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise FolderRefused(f"{name}: its {RECORD_FILENAME} is not a record the harness wrote ({exc}): nothing was "
                            "changed") from None
    return Record(data["written_by"], frozenset(folders), files, links)


def _entries(folder: Path, record: Record | None = None, name: str = "") -> dict[str, Entry]:
    """Everything under ``folder`` but its record, by ``/``-separated relative path (links not
    followed), level by level; with ``record``, :class:`FolderRefused` at the first thing it does
    not list (``name``: the folder, for the message), before looking inside it."""
    found: dict[str, Entry] = {}
    folders = collections.deque([("", folder)])
    while folders:  # a loop, not recursion: a folder nested thousands deep is walked all the same
        prefix, directory = folders.popleft()
        with os.scandir(directory) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            path = prefix + item.name
            if path == RECORD_FILENAME:
                continue
            info = item.stat(follow_symlinks=False)
            kind = ("folder" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode)
                    else "link" if stat.S_ISLNK(info.st_mode) else "other")
            if record is not None and not _recorded(record, path, kind):
                raise FolderRefused(f"{name}: holds {path}, which the harness did not write: nothing was changed; move "
                                    "it out or give another folder")
            # a folder's own size and time change when it is renamed: what it holds tells a change
            found[path] = Entry(kind, 0, 0) if kind == "folder" else Entry(kind, info.st_size, info.st_mtime_ns)
            if kind == "folder":
                folders.append((path + "/", Path(item.path)))
    return found


def sha256_of(path: Path) -> str:
    """The sha256 of a regular file's bytes (a link is not followed)."""
    digest = hashlib.sha256()
    fd = open_regular(path, follow=False)
    with os.fdopen(fd, "rb") as f:
        os.set_blocking(fd, True)
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_of(folder: Path, writer: str) -> Record:
    """The record of everything in ``folder`` (which the harness has just written)."""
    entries = _entries(folder)
    kinds = {kind: [p for p, e in entries.items() if e.kind == kind] for kind in ("folder", "file", "link", "other")}
    if kinds["other"]:
        raise FolderRefused(f"{path_text(folder)}: {kinds['other'][0]} is not a file, folder or link")
    return Record(writer, frozenset(kinds["folder"]), {p: sha256_of(folder / p) for p in kinds["file"]},
                  {p: os.readlink(folder / p) for p in kinds["link"]})
