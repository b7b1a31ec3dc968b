"""``harness accuracy --shard K/N`` and the merge of its shards.

A shard classifies its images on every path and writes, beside its accuracy.json, what the
scores are computed from: ``predictions.json`` (each path's top-k classes and failures, the
reference's logits of the images whose top-1 some path changes, for the tie margins; its
samples with their place in the whole dataset; the class names). The merge pools them and
scores once, with the same :func:`~harness.accuracy.scoring.evaluate` a run calls: every
statistic is then exactly the one run's, those that do not combine from the shards' own
scores included (macro recall and precision average per-class scores over pooled images;
McNemar's p-value is a binomial tail of the pooled counts). Only the seconds differ: the
merged report gives the longest shard's.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.accuracy.dataset import Dataset
from harness.accuracy.predict import Predictions
from harness.errors import UsageError
from harness.run_identity import embedded_as_one, first_difference
from harness.shard import Shard, ShardRecord, check_split

PREDICTIONS_FILENAME = "predictions.json"
ACCURACY_JSON = "accuracy.json"
IDENTITY_FIELDS = ("reference", "spec", "tie_margin", "top_k")
"""accuracy.json's fields two shards of one run share (with the deployment, options, versions and dataset)."""


def shard_dataset(dataset: Dataset, shard: Shard) -> Dataset:
    """The shard's samples (by their name: the path relative to the dataset)."""
    return dataclasses.replace(dataset, samples=tuple(s for s in dataset.samples if shard.holds(s.name)))


def write_shard(directory: Path, shard: Shard, full: Dataset, part: Dataset, predictions: Sequence[Predictions],
                classes: Sequence[str]) -> None:
    """``predictions.json`` and ``shard.json`` of one shard (its accuracy.json is written by the run)."""
    position = {s.name: i for i, s in enumerate(full.samples)}
    reference, deployed = predictions[0], predictions[1:]
    changed = {name for name, top in reference.top_k.items()
               if any(name in p.top_k and p.top_k[name][0] != top[0] for p in deployed)}
    content = {
        "classes": list(classes),
        "samples": [[position[s.name], s.name, str(s.path), s.label] for s in part.samples],
        "paths": [{"path": p.path, "top_k": {k: list(v) for k, v in p.top_k.items()}, "failed": dict(p.failed),
                   "logits": {k: np.asarray(v, np.float32).tolist() for k, v in p.logits.items() if k in changed}}
                  for p in predictions],
    }
    (directory / PREDICTIONS_FILENAME).write_text(json.dumps(content, allow_nan=False) + "\n")
    ShardRecord.of(shard, [s.name for s in full.samples]).write(directory)


@dataclass(frozen=True)
class AccuracyShard:
    directory: Path
    record: ShardRecord
    report: dict
    """Its accuracy.json."""
    content: dict
    """Its predictions.json."""

    @property
    def name(self) -> str:
        return f"shard {self.record.shard} ({self.directory})"


def identity(report: dict, content: dict) -> dict:
    """What two shards of one accuracy run share (see :mod:`harness.run_identity` for a check's)."""
    deployed = {**report["deployed"], "url": embedded_as_one(report["deployed"]["url"])}
    run = {k: v for k, v in report.get("run", {}).items() if k != "seconds"}
    dataset = {k: report["dataset"][k] for k in ("layout", "labeled")}
    return {**{k: report.get(k) for k in IDENTITY_FIELDS}, "deployed": deployed, "run": run, "dataset": dataset,
            "versions": report.get("versions"), "classes": content["classes"]}


def read_shards(directories: Sequence[Path]) -> list[AccuracyShard]:
    shards = []
    for directory in directories:
        record = ShardRecord.read(directory)
        try:
            report = json.loads((directory / ACCURACY_JSON).read_text())
            content = json.loads((directory / PREDICTIONS_FILENAME).read_text())
        except FileNotFoundError as exc:
            raise UsageError(f"{directory}: the shard has no {Path(exc.filename).name} (did its accuracy run to the "
                             "end?)") from None
        shards.append(AccuracyShard(directory, record, report, content))
    shards = check_split(shards)
    first = identity(shards[0].report, shards[0].content)
    for shard in shards[1:]:
        difference = first_difference(first, identity(shard.report, shard.content))
        if difference:
            raise UsageError(f"{shard.name} is not the same run as {shards[0].name}: {difference}")
    return shards
