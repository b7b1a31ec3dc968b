"""One shard of a run split over N processes (``--shard K/N``): which images it holds, and
the record each shard leaves in its report directory so that ``harness merge`` can prove the
shards it is given are all of one split of one image listing, each exactly once.

An image belongs to shard K of N when the SHA-256 of its file name, as a number, is K modulo
N: stable across runs, machines and file systems (no listing order, no clock), with no
coordination between the shards, and adding an image moves no other image.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence, TypeVar

from harness.errors import UsageError

SHARD_FILENAME = "shard.json"


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


_Named = TypeVar("_Named", bound=_HasName)


@dataclass(frozen=True)
class Shard:
    index: int
    """K: 0 to count - 1 (a Kubernetes Indexed Job's completion index)."""
    count: int
    """N: how many shards the images are split into."""

    @staticmethod
    def parse(text: str) -> "Shard":
        """``K/N``, 0 <= K < N (a clear error otherwise)."""
        index, slash, count = text.partition("/")
        try:
            shard = Shard(int(index), int(count)) if slash else None
        except ValueError:
            shard = None
        if shard is None or not 0 <= shard.index < shard.count:
            raise UsageError(f"--shard takes K/N with 0 <= K < N (e.g. 0/3), got {text!r}")
        return shard

    def holds(self, name: str) -> bool:
        digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index

    def select(self, entries: Sequence[_Named]) -> list[_Named]:
        """This shard's entries of ``entries`` (paths, listed inputs or skipped entries: by
        ``name``), in their order."""
        return [e for e in entries if self.holds(e.name)]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def listing_digest(names: Sequence[str]) -> str:
    """The SHA-256 of the sorted image names: equal only for the same image listing."""
    return hashlib.sha256("\n".join(sorted(names)).encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class ShardRecord:
    """What a shard wrote beside its report: its place in the split and the listing it split."""

    shard: Shard
    listed: int
    """Images in the whole listing (every shard's)."""
    listing_sha256: str
    selected: int
    """Images this shard holds."""

    @staticmethod
    def of(shard: Shard, names: Sequence[str]) -> "ShardRecord":
        """The record of ``shard`` of the images named ``names`` (file names, or a dataset's
        relative paths: what :meth:`Shard.holds` is asked)."""
        return ShardRecord(shard, len(names), listing_digest(names), sum(map(shard.holds, names)))

    def write(self, directory: Path) -> Path:
        path = directory / SHARD_FILENAME
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps({"shard": {"index": self.shard.index, "count": self.shard.count},
                                       "listed": self.listed, "listing_sha256": self.listing_sha256,
                                       "selected": self.selected}, indent=1) + "\n")
        partial.replace(path)
        return path

    @staticmethod
    def read(directory: Path) -> "ShardRecord":
        path = directory / SHARD_FILENAME
        try:
            d = json.loads(path.read_text())
            return ShardRecord(Shard(int(d["shard"]["index"]), int(d["shard"]["count"])), int(d["listed"]),
                               str(d["listing_sha256"]), int(d["selected"]))
        except FileNotFoundError:
            raise UsageError(f"{directory}: not a shard of a sharded run (no {SHARD_FILENAME}; "
                             "run harness check --shard K/N)") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: unreadable shard record ({type(exc).__name__}: {exc})") from None


def check_split(shards: list) -> list:
    """``shards`` (each with ``record``, ``directory`` and ``name``) in index order, refused
    unless they are one split of one listing, every index once."""
    if not shards:
        raise UsageError("harness merge needs the report directories of the shards")
    shards = sorted(shards, key=lambda s: s.record.shard.index)
    first = shards[0]
    count = first.record.shard.count
    for shard in shards:
        if shard.record.shard.count != count:
            raise UsageError(f"{shard.name} is of a split into {shard.record.shard.count}, {first.name} of one into "
                             f"{count}: not shards of one run")
    by_index: dict[int, object] = {}
    for shard in shards:
        twice = by_index.setdefault(shard.record.shard.index, shard)
        if twice is not shard:
            raise UsageError(f"shard {shard.record.shard} given twice: {twice.directory} and {shard.directory}")
    missing = [f"{k}/{count}" for k in range(count) if k not in by_index]
    if missing:
        raise UsageError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing: merging needs all "
                         f"{count} (given {', '.join(str(s.record.shard) for s in shards)}); a merge of some "
                         "shards would be a silently shorter report")
    for shard in shards:
        if (shard.record.listed, shard.record.listing_sha256) != (first.record.listed, first.record.listing_sha256):
            raise UsageError(f"{shard.name} split another image listing ({shard.record.listed} images) than "
                             f"{first.name} ({first.record.listed}): not the same images")
    return shards
