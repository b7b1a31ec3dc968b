"""Training data: the labeled sets ``harness accuracy`` reads, split, subsampled and sharded.

A training dataset is an ImageFolder directory (one sub-directory per class), a CSV of
``file,label`` rows, or a directory holding ``train/`` (and optionally ``val/``) in one of
those layouts. The classes are the training set's own: the class directories, or the CSV's
labels, sorted by name; their order is the order of the trained model's outputs.
The samples are read by :func:`harness.accuracy.load_dataset`, the reader ``harness
accuracy`` uses, so training and evaluation agree on every file and label.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.accuracy import CSV_HEADER_FILE, CSV_HEADER_LABEL, Dataset, DatasetError, Sample, load_dataset

TRAIN_DIR = "train"
VAL_DIR = "val"


@dataclass(frozen=True)
class TrainingSet:
    classes: tuple[str, ...]
    """Class names in model output order."""
    train: Dataset
    val: Dataset | None
    """None when the dataset has no ``val/``."""


def class_names(source: Path) -> tuple[str, ...]:
    """The classes of an ImageFolder directory (its class directories) or a CSV (its labels), sorted."""
    if source.is_file():
        with source.open(newline="") as f:
            rows = [[c.strip() for c in row] for row in csv.reader(f) if any(c.strip() for c in row)]
        if rows and rows[0][0].lower() in CSV_HEADER_FILE and rows[0][-1].lower() in CSV_HEADER_LABEL:
            rows = rows[1:]
        return tuple(sorted({row[-1] for row in rows if row}))
    if not source.is_dir():
        raise DatasetError(f"dataset not found: {source}")
    classes = tuple(sorted(p.name for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")))
    if not classes:
        raise DatasetError(f"{source} has no class directories: training needs an ImageFolder layout or a CSV")
    return classes


def load_training_set(source: Path) -> TrainingSet:
    """``source/train`` and ``source/val`` if ``source`` has a ``train/``, else ``source``
    alone (no validation set). Raises :class:`DatasetError` for a layout it cannot read."""
    train_source = source / TRAIN_DIR if (source / TRAIN_DIR).is_dir() else source
    classes = class_names(train_source)
    train = load_dataset(train_source, classes)
    val_source = source / VAL_DIR
    val = load_dataset(val_source, classes) if train_source != source and val_source.is_dir() else None
    for dataset in (train, val):
        if dataset is not None and not dataset.labeled:
            raise DatasetError(f"{dataset.source}: training needs labels (class directories or a CSV)")
    return TrainingSet(classes, train, val)


def stratified_fraction(samples: Sequence[Sample], fraction: float, seed: int) -> tuple[Sample, ...]:
    """Keep ``fraction`` of each class (rounded, at least one image a class), drawn with
    ``seed``; the kept samples stay in their original order."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return tuple(samples)
    by_class: dict[int, list[int]] = defaultdict(list)
    for i, sample in enumerate(samples):
        by_class[sample.label].append(i)
    rng = np.random.default_rng(seed)
    kept: list[int] = []
    for label in sorted(by_class):
        indices = by_class[label]
        count = max(1, int(round(fraction * len(indices))))
        kept += rng.choice(indices, size=count, replace=False).tolist()
    return tuple(samples[i] for i in sorted(kept))


def shard(items: Sequence, rank: int, world_size: int) -> list:
    """Rank ``rank``'s share of ``items`` for data-parallel training: every rank gets the
    same count (the list is padded by wrapping around, as ``DistributedSampler`` does, so
    no rank runs out of batches first), interleaved so the shards are disjoint up to the
    padding."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    items = list(items)
    if world_size == 1 or not items:
        return items
    total = -(-len(items) // world_size) * world_size
    padded = [items[i % len(items)] for i in range(total)]
    return padded[rank::world_size]
