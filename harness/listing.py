"""Which entries of an image folder are inputs: one policy for every command.

Inputs are the files the user named, by naming their folder:

- a **regular file** directly in the folder is an input;
- a **symbolic link** is followed only when it resolves to a regular file *inside* the
  folder (``follow_links=True``, the ``--follow-links`` option, follows links anywhere);
- every other entry is **skipped, with its reason**: a hidden entry (name starting with a
  dot), a directory (not searched), a FIFO, socket or device, a link leading outside the
  folder, a broken link, a link loop, a name that collides with another once escaped.

Nothing vanishes: :attr:`Listing.entries` counts every entry, ``inputs + skipped``. Names are
:func:`harness.names.identifier`\\ s (bytes-safe). :func:`read_input` reads an input
without following a link planted after the listing, and never opens anything but a regular
file (a FIFO swapped in cannot block a worker).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.files import InputFileError, kind_of, read_limited
from harness.names import identifier, path_text

MAX_FILE_BYTES = 256 * 2 ** 20
"""The largest input file read (256 MiB): a bigger one is its own failed row, never read
into memory (the largest photo formats stay far below; the decoded size is bounded apart,
by the pixel limit and the run's memory budget)."""


@dataclass(frozen=True)
class InputFile:
    """One input: its name (an :func:`~harness.names.identifier`) and the file to read."""

    name: str
    path: Path
    """The entry in the folder."""
    target: Path
    """What is read: the entry itself, or the file a link the listing followed resolves to
    (read without following links, so a link swapped in after the listing is refused)."""
    follow: bool = False
    """Follow links when reading (a file named by its own path, not listed)."""

    @staticmethod
    def of(path: Path) -> "InputFile":
        """A file the user named by its path (not listed from a folder): followed if a link."""
        return InputFile(identifier(path), Path(path), Path(path), follow=True)


@dataclass(frozen=True)
class Skipped:
    """A folder entry that is not an input, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Listing:
    directory: Path
    inputs: tuple[InputFile, ...]
    skipped: tuple[Skipped, ...]

    @property
    def entries(self) -> int:
        """Every entry of the folder: inputs + skipped."""
        return len(self.inputs) + len(self.skipped)


def list_inputs(directory: Path, follow_links: bool = False) -> Listing:
    """The inputs of ``directory`` by the module's policy, sorted by name; every other entry
    in :attr:`Listing.skipped`. Raises :class:`UsageError` when ``directory`` is not a
    readable directory."""
    directory = Path(directory)
    try:
        root = directory.resolve(strict=True)
        names = sorted(os.listdir(directory), key=os.fsencode)
    except FileNotFoundError:
        raise UsageError(f"image directory not found: {path_text(directory)}") from None
    except NotADirectoryError:
        raise UsageError(f"not a directory: {path_text(directory)} (give the folder of the images)") from None
    except (OSError, RuntimeError) as exc:  # permission, a link loop as the folder itself
        raise UsageError(f"cannot list {path_text(directory)}: {getattr(exc, 'strerror', None) or exc}") from None
    inputs, skipped, seen = [], [], {}
    for raw in names:
        name = identifier(raw)
        if name in seen:
            skipped.append(Skipped(name, f"its name, escaped, is the same as another entry's ({seen[name]!r})"))
            continue
        seen[name] = raw
        entry = directory / raw
        reason = _why_not_an_input(entry, raw, root, follow_links)
        if reason is not None:
            skipped.append(Skipped(name, reason))
        else:
            inputs.append(InputFile(name, entry, entry.resolve() if entry.is_symlink() else entry))
    return Listing(directory, tuple(inputs), tuple(skipped))


def file_in(directory: Path, relative: str | os.PathLike) -> InputFile:
    """The input a label file names by its path ``relative`` to ``directory`` (a COCO image's
    ``file_name``, a photo's mask), judged by this module's policy: an absolute path, a ``..``,
    a link leading outside the folder, anything but a regular file is refused
    (:class:`harness.files.InputFileError` saying why: the entry's own row, never a file read
    outside the folder); a missing file is ``FileNotFoundError``."""
    relative = Path(relative)
    directory = Path(directory)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise InputFileError(relative, f"not a path inside {path_text(directory)} (absolute, or with ..)")
    entry = directory / relative
    try:
        root = directory.resolve(strict=True)
        parent = entry.parent.resolve(strict=True)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file", str(entry)) from None
    except (OSError, RuntimeError) as exc:
        raise InputFileError(entry, f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if not parent.is_relative_to(root):
        raise InputFileError(entry, f"its folder leads outside {path_text(directory)} ({path_text(parent)})")
    if not os.path.lexists(entry):
        raise FileNotFoundError(errno.ENOENT, "no such file", str(entry))
    reason = _why_not_an_input(entry, relative.name, root, follow_links=False)
    if reason is not None:
        raise InputFileError(entry, reason)
    return InputFile(identifier(relative), entry, entry.resolve() if entry.is_symlink() else entry)


def _why_not_an_input(entry: Path, raw: str, root: Path, follow_links: bool) -> str | None:
    if raw.startswith("."):
        return "hidden (its name starts with a dot)"
    try:
        info = entry.lstat()
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if not stat.S_ISLNK(info.st_mode):
        return None if stat.S_ISREG(info.st_mode) else f"not a regular file: {kind_of(info.st_mode)}"
    try:
        target = entry.resolve(strict=True)
    except FileNotFoundError:
        return f"broken symbolic link (to {path_text(os.readlink(entry))})"
    except (RuntimeError, OSError) as exc:  # RuntimeError: a loop (Python < 3.13), OSError ELOOP after
        if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
            return "symbolic link loop"
        return f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if not follow_links and not target.is_relative_to(root):
        return f"symbolic link to outside the folder ({path_text(target)}; --follow-links follows it)"
    try:
        mode = target.stat().st_mode
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return f"symbolic link to {kind_of(mode)}"
    return None


def read_input(file: InputFile, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of one input: only a regular file, never through a link the listing did not
    follow, at most ``limit`` bytes; :class:`harness.files.InputFileError` (an ``OSError``)
    saying why not."""
    return read_limited(file.target, limit, "image file", follow=file.follow)
