"""``harness accuracy --shard K/N`` and the merge of its shards.

A shard classifies its images on every path and writes, beside its accuracy.json, what the
scores are computed from: ``predictions.json`` (each path's top-k classes and failures, the
reference's logits of the images whose top-1 some path changes, for the tie margins; its
samples with their place in the whole dataset; the class names). The merge pools them and
scores once, with the same :func:`~harness.accuracy.job.score` a run calls (the task's
:meth:`~harness.task_api.Task.effect_on`): every
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
from harness.results.accuracy import LAYOUT
from harness.run_identity import embedded_as_one, first_difference
from harness.shard import Shard, ShardRecord, check_split

PREDICTIONS_FILENAME = "predictions.json"
ACCURACY_JSON = "accuracy.json"
IDENTITY_FIELDS = ("task", "reference", "spec")
"""accuracy.json's fields two shards of one run share (with the deployment, options, versions and dataset)."""
OLD_LAYOUT_SCORES = ("top_k", "tie_margin", "paths", "images")
"""The top-level fields of the layout classification's accuracy.json had before every task reported
under ``effect`` (harness 2026-12 and older): read by :func:`read_accuracy_json`."""


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


def read_accuracy_json(path: Path) -> dict:
    """An accuracy.json in the one layout (:data:`harness.results.accuracy.LAYOUT`), whichever
    layout it was written in: the old classification layout (its scores at the top level) is read
    as the classification run it is; anything else is refused, naming the layout it lacks."""
    report = json.loads(path.read_text())
    if not isinstance(report, dict):
        raise UsageError(f"{path}: not an accuracy.json (a JSON object with an {LAYOUT!r} section)")
    if LAYOUT in report:
        return report
    if not all(field in report for field in OLD_LAYOUT_SCORES):
        raise UsageError(f"{path}: neither accuracy.json layout (every task's scores under {LAYOUT!r}, or the old "
                         f"classification layout with {', '.join(OLD_LAYOUT_SCORES)} at the top level)")
    from harness.compare.top_k_effect import ensemble

    old = {k: v for k, v in report.items() if k not in OLD_LAYOUT_SCORES}
    dataset = {("labels" if k == "classes" else k): v for k, v in old["dataset"].items()}
    return {"task": "classification", **old,
            "deployed": {**old["deployed"], "models": [str(ensemble(p)) for p in old["deployed"]["pipelines"]]},
            "run": {**old.get("run", {}), "tie_margin": report["tie_margin"], "top_k": report["top_k"]},
            "dataset": dataset,
            LAYOUT: {"paths": report["paths"],
                     "images": [{k: v for k, v in image.items() if k != "label"} for image in report["images"]]},
            "images": [{"image": image["image"], "label": image["label"]} for image in report["images"]]}


def read_shards(directories: Sequence[Path]) -> list[AccuracyShard]:
    shards = []
    for directory in directories:
        record = ShardRecord.read(directory)
        try:
            report = read_accuracy_json(directory / ACCURACY_JSON)
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
