"""``harness merge``: the reports of the N shards of one check (``harness check --shard K/N``)
joined into the report one run over every image would have written.

Every image's result is in its shard's images.jsonl; merging folds them again, in the shards'
order, through the same :class:`~harness.compare.aggregate.RunSummary` a run folds them
through (its means are exact sums, so the order does not change a bit), keeps the worst
images' visuals among those the shards kept (a shard keeps the worst of its own images, so
the worst of all are among them), and writes report.json, report.md, report.html,
images.jsonl and per_image.csv as a run does. The cost is reading the shards' JSON lines: no
image is decoded, no server asked.

Refused, with a one-line reason, before anything is written: a directory that is not a shard,
a shard missing or given twice, shards of different splits or image listings, shards of
different runs (:func:`harness.run_identity.run_identity`: spec, reference, deployment,
options, versions), a shard that stopped before all its images, or an image in the wrong shard.

The shards of ``harness accuracy --shard K/N`` are pooled by :func:`merge_accuracy` (see
:mod:`harness.accuracy.shards`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from harness.accuracy import Dataset, Predictions, Sample
from harness.accuracy.job import AccuracyOptions, score
from harness.accuracy.job import AccuracyResult as AccuracyJobResult
from harness.accuracy.report import write_accuracy_files
from harness.check.files import CSV_FILENAME, RESULTS_FILENAME, VISUALS_DIRNAME, csv_header, csv_row
from harness.check.rundir import MANIFEST_FILENAME, RunDirectory, RunManifest
from harness.check.visuals import VisualStore
from harness.compare.aggregate import RunSummary
from harness.compare.comparators import ARRAYS, TOP_K, TopKTolerance
from harness.deployment.stepwise import ReplayStats
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.files import strict_json, write_atomic
from harness.names import path_text
from harness.report import write_reports
from harness.result import ImageResult
from harness.results import AccuracyRun, CheckReport, ReferenceInfo, ServerInfo
from harness.results.parse import check_run, deployed_info, reference_info, spec_info
from harness.run_identity import first_difference, run_identity
from harness.shard import ShardRecord, check_split, listing_digest
from harness.stage import TENSOR_STAGES, Stage
from harness.task import get_task

if TYPE_CHECKING:
    from harness.accuracy.job import AccuracyResult as AccuracyJobResult
    from harness.check.visuals import VisualStore
    from harness.results import CheckReport


@dataclass(frozen=True)
class ShardRun:
    directory: Path
    record: ShardRecord
    report: dict
    """Its report.json."""

    @property
    def name(self) -> str:
        return f"shard {self.record.shard} ({self.directory})"


@dataclass(frozen=True)
class MergeResult:
    report: "CheckReport"
    """The merged report."""
    paths: dict[str, Path]
    shards: tuple[ShardRun, ...]

    def exit_status(self) -> int:
        """What one run's :meth:`~harness.check.job.CheckResult.exit_status` would be."""
        summary, run = self.report.summary, self.report.run
        if not summary.compared:
            raise NothingCompared(f"none of the {summary.images} images of the {len(self.shards)} shards could be "
                                  "compared: the run says nothing about the deployment")
        return EXIT_FOUND if self.report.fails(run.fail_on, run.allow_rejected) else EXIT_OK


def read_shards(directories: Sequence[Path]) -> list[ShardRun]:
    """The shards in index order, each checked against the first: one split, one listing, one
    run, all complete, each index once."""
    shards = []
    for directory in directories:
        if not directory.is_dir():
            raise UsageError(f"{directory}: not a folder (give the shards' --report folders)")
        record = ShardRecord.read(directory)  # first: a folder that is not a shard says so
        try:
            report = json.loads((directory / "report.json").read_text())
        except FileNotFoundError:
            raise UsageError(f"{directory}: the shard has no report.json (did its check run to the end?)") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{directory / 'report.json'}: not JSON ({exc})") from None
        shards.append(ShardRun(directory, record, report))
    shards = check_split(shards)
    first = shards[0]
    identity = run_identity(first.report)
    for shard in shards:
        difference = first_difference(identity, run_identity(shard.report))
        if difference:
            raise UsageError(f"{shard.name} is not the same run as {first.name}: {difference}")
        if shard.report["run"].get("incomplete"):
            raise UsageError(f"{shard.name} stopped before all its images ({shard.report['run'].get('stopped_reason')})"
                             f": finish it with harness check ... --shard {shard.record.shard} --resume, then merge")
    return shards


def merge(directories: Sequence[Path], out: Path, formats: Sequence[str] | None = None) -> MergeResult:
    """Merge the check shards in ``directories`` into ``out`` (see the module); ``formats``:
    ``--format`` (None: a check's files; its records always, :data:`harness.report.CHECK_REPORTS`)."""
    shards = read_shards(directories)
    if any(out.resolve() == s.directory.resolve() for s in shards):
        raise UsageError(f"--report {out} is one of the shards: merge into another directory")
    # --report as check takes it (a directory this run locks: a file, or a directory another run
    # holds, is refused in one line before anything is written); built in a staging folder inside
    # it and moved in when complete: a refusal met while folding leaves no staging folder behind.
    created = not os.path.lexists(out)
    try:
        with RunDirectory(out) as run_dir:
            staging = run_dir.subdirectory(".merging")
            try:
                shutil.rmtree(staging)
                staging.mkdir()
                report, visuals = fold(shards, staging)
                paths = write_reports(staging, report, visuals, formats, check_run=True)
                manifest = merged_manifest(shards)
                if manifest is not None:
                    write_atomic(staging / MANIFEST_FILENAME,
                                 strict_json(manifest.to_dict(), indent=1, sort_keys=True) + "\n")
                shutil.rmtree(out / VISUALS_DIRNAME, ignore_errors=True)
                for path in staging.iterdir():
                    path.replace(out / path.name)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        if created and os.path.isdir(out) and not os.path.islink(out):
            shutil.rmtree(out, ignore_errors=True)  # refused: nothing left behind, not even the lock
        raise
    return MergeResult(report, {kind: out / path.name for kind, path in paths.items()}, tuple(shards))


def merged_manifest(shards: Sequence[ShardRun]):
    """The merged run's run.json: the shards' one run (their identity, checked equal by
    :func:`read_shards`) with no shard, and which shards it was merged from; None when the
    shards wrote none (older harness versions)."""
    try:
        first = RunDirectory(shards[0].directory).read_manifest()
    except UsageError:
        return None
    if first is None:
        return None
    identity = {**first.identity, "shard": None,
                "merged": {"shards": len(shards), "from": [path_text(s.directory.resolve()) for s in shards]}}
    return RunManifest(first.command, identity, first.settings)


def fold(shards: Sequence[ShardRun], out: Path) -> tuple["CheckReport", "VisualStore"]:
    """The shards' images folded into one run's report (and its visuals, and images.jsonl and
    per_image.csv, written to ``out``)."""
    visuals = VisualStore(out / VISUALS_DIRNAME)
    for shard in shards:  # the candidates: each shard's worst (the store unlinks the others)
        for path in sorted((shard.directory / VISUALS_DIRNAME).glob("*.npz")):
            shutil.copyfile(path, visuals.directory / path.name)

    first = shards[0].report
    task = get_task(first.get("task"))  # reports before issue 26: the default task
    summary, seen = RunSummary(events=task.events(first["run"]["tie_margin"])), {}
    judge = VerdictCheck(spec_info(first["spec"]).tolerances, float(first["run"]["tie_margin"]))
    with (out / RESULTS_FILENAME).open("w") as results, (out / CSV_FILENAME).open("w", newline="") as table:
        writer = csv.writer(table)
        writer.writerow(csv_header(task))
        for shard in shards:
            rows = 0
            with (shard.directory / RESULTS_FILENAME).open() as lines:
                for number, line in enumerate(lines, 1):
                    if not line.strip():
                        continue
                    try:
                        result = ImageResult.from_dict(json.loads(line))
                    except (ValueError, KeyError, TypeError) as exc:
                        raise UsageError(f"{shard.directory / RESULTS_FILENAME}, line {number}: not an image's result "
                                         f"({type(exc).__name__}: {exc})") from None
                    if not shard.record.shard.holds(result.image):
                        raise UsageError(f"{shard.name} holds {result.image!r}, an image of another shard")
                    if result.image in seen:
                        raise UsageError(f"{result.image!r} is in {seen[result.image]} and in {shard.name}")
                    contradiction = judge.contradiction(result)
                    if contradiction:
                        raise UsageError(f"{shard.directory / RESULTS_FILENAME}, line {number}: {result.image!r}: "
                                         f"{contradiction}: the row contradicts its own verdict (edited?); run the "
                                         f"shard again")
                    seen[result.image] = shard.name
                    rows += 1
                    summary.add(result)
                    visuals.offer(result, None)
                    results.write(line if line.endswith("\n") else line + "\n")
                    writer.writerow(csv_row(result, task))
            if rows != shard.record.selected:
                raise UsageError(f"{shard.name} reported {rows} of its {shard.record.selected} images: finish it "
                                 f"with harness check ... --shard {shard.record.shard} --resume, then merge")
    for stray in set(p.name for p in visuals.directory.glob("*.npz")) - {
            path.name for stage in visuals.heaps for _, path in visuals.worst(stage)}:
        (visuals.directory / stray).unlink()  # a copied candidate that never entered a heap

    deployed = deployed_info(merged_replay(first["deployed"], [s.report["deployed"] for s in shards]))
    # The shards ran side by side: the run took as long as the longest.
    run = dataclasses.replace(check_run(first["run"]), seconds=max(s.report["run"]["seconds"] for s in shards))
    report = CheckReport(summary=summary.result(), spec=spec_info(first["spec"]), versions=first["versions"],
                         reference=reference_info(first["reference"]), deployed=deployed, run=run,
                         classes=tuple(first.get("classes", ())))
    if report.summary.images != shards[0].record.listed:  # every image listed is an image reported
        raise RuntimeError(f"{report.summary.images} images merged of {shards[0].record.listed} listed")
    if listing_digest(list(seen)) != shards[0].record.listing_sha256:  # the rows' names, not shard.json's word
        raise UsageError(f"the {len(seen)} entries the shards' rows name are not the listing the shards split "
                         f"({shards[0].record.listed} entries, listing_sha256 {shards[0].record.listing_sha256[:12]}...): "
                         "a row was removed, added or renamed; run the shards again")
    return report, visuals


class VerdictCheck:
    """Each row's verdicts judged again from its own metrics by the run's rules (the spec's
    tolerances, the tie margin): a row whose numbers say another verdict than it states was
    not written by a run."""

    def __init__(self, tolerances: dict, tie_margin: float):
        self.tolerances, self.tie_margin = tolerances, tie_margin

    def contradiction(self, result) -> str | None:
        for s in result.stages:
            for stated, metrics, which in ((s.verdict, s.metrics, ""), (s.isolated_verdict, s.isolated, " (isolated)")):
                if stated is None or not metrics:
                    continue
                try:
                    if s.stage in TENSOR_STAGES and s.stage in self.tolerances and "max_abs" in metrics:
                        judged = ARRAYS.rejudge(metrics, self.tolerances[s.stage])
                    elif s.stage is Stage.TOPK and "same_order" in metrics:
                        judged = TOP_K.rejudge(metrics, TopKTolerance(self.tie_margin))
                    else:
                        continue  # a task's own result (boxes): judged by its task, not re-derivable here
                except (KeyError, TypeError, ValueError) as exc:
                    return f"stage {s.stage}{which}: metrics unreadable ({type(exc).__name__}: {exc})"
                if judged is not stated:
                    shown = {k: metrics[k] for k in ("max_abs", "mean_abs", "fraction_over_tolerance", "same_order",
                                                     "top1_prob_change") if k in metrics}
                    return f"stage {s.stage}{which} says {stated.value}, its metrics {shown} say {judged.value}"
        return None


def merged_replay(first: dict, shards: Sequence[dict]) -> dict:
    """``first`` (a shard's report.json ``deployed``) with the step-by-step replay of an
    ensemble found on the server (``--model``) summed over the shards' ``deployed``: images
    replayed, mismatches, the largest difference, and the line ``found`` says it in. The
    mismatched images listed (at most 20) are in shard order; one run lists them in the order
    they completed."""
    replays = [d.get("deployment", {}).get("replay") for d in shards]
    if not replays[0]:
        return first
    names = [name for r in replays for name in r["mismatched_images"]]
    mismatched = sum(r["mismatched"] for r in replays)
    replay = {"images": sum(r["images"] for r in replays), "mismatched": mismatched,
              "mismatched_images": names[:20], "max_abs_diff": max(float(r["max_abs_diff"]) for r in replays),
              "trusted": not mismatched}
    # The sentence a run's ReplayStats writes (it reads only the count of its mismatched list).
    line = ReplayStats(replay["images"], (names + [""] * mismatched)[:mismatched], replay["max_abs_diff"]).describe()
    found = [line if f.startswith("step-by-step replay") else f for f in first["deployment"]["found"]]
    return {**first, "deployment": {**first["deployment"], "replay": replay, "found": found}}


def merge_accuracy(directories: Sequence[Path], out: Path, formats: Sequence[str] | None = None) -> "AccuracyJobResult":
    """Pool the ``harness accuracy --shard`` shards in ``directories`` and write the one run's
    accuracy.json and accuracy.md (or ``formats``) to ``out`` (see :mod:`harness.accuracy.shards`)."""
    from harness.accuracy.shards import read_shards  # here: accuracy's read_shards, not this module's

    shards = read_shards(directories)
    if any(out.resolve() == s.directory.resolve() for s in shards):
        raise UsageError(f"--report {out} is one of the shards: merge into another directory")
    first, content = shards[0].report, shards[0].content
    rows = sorted((row for s in shards for row in s.content["samples"]), key=lambda row: row[0])
    if len(rows) != shards[0].record.listed or [row[0] for row in rows] != list(range(len(rows))):
        raise UsageError(f"the shards hold {len(rows)} of the {shards[0].record.listed} images listed: "
                         "a shard is incomplete")
    source = Path(first["dataset"]["source"])
    dataset = Dataset(source, first["dataset"]["layout"],
                      tuple(Sample(name, Path(path), label) for _, name, path, label in rows), tuple(content["classes"]))
    predictions = []
    for i, path in enumerate(content["paths"]):
        parts = [s.content["paths"][i] for s in shards]
        predictions.append(Predictions(
            path["path"], {k: tuple(v) for p in parts for k, v in p["top_k"].items()},
            {k: v for p in parts for k, v in p["failed"].items()},
            {k: np.asarray(v, np.float32) for p in parts for k, v in p["logits"].items()}))
    run = first["run"]
    task = get_task(first["task"])
    if task.unshardable:
        raise UsageError(f"{shards[0].name}: the {task.name} task is not scored a shard at a time ({task.unshardable})")
    report = score(task, dataset, {p.path: p.failed for p in predictions}, {"predictions": predictions},
                   run["tie_margin"], dataset.label_names, run["top_k"], models=tuple(first["deployed"]["models"]),
                   reference=ReferenceInfo(first["reference"]["recipe"], first["reference"]["model"],
                                           first["reference"].get("recipe_name")),
                   server=ServerInfo(first["deployed"]["url"], first["deployed"]["protocol"]), spec=first["spec"],
                   run=AccuracyRun(**{**run, "seconds": max(s.report["run"]["seconds"] for s in shards)}),
                   versions=first.get("versions", {}))
    files = write_accuracy_files(out, report, formats)
    options = AccuracyOptions(source, out, fail_on=run["fail_on"], allow_rejected=run["allow_rejected"], formats=formats)
    return AccuracyJobResult(report, files.get("json"), files.get("markdown"), options, files)
