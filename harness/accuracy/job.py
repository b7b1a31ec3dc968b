"""``harness accuracy`` as a job: :func:`run` takes a :class:`~harness.session.Session` and
:class:`AccuracyOptions` and returns the written report; the command line only parses into
these and prints."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness.accuracy.dataset import Dataset, load_dataset, read_sample
from harness.accuracy.predict import TOP_K, predict_deployed, predict_reference
from harness.accuracy.report import write_accuracy_files
from harness.accuracy.shards import shard_dataset, write_shard
from harness.check.job import Progress, no_progress
from harness.check.rundir import report_locked
from harness.client import PIPELINES
from harness.corpus import list_images
from harness.deployment import DeployedSide
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.outcome import Outcome, outcome_of
from harness.reference.reading import proven_reference
from harness.report import versions
from harness.report.formats import require_formats
from harness.result import one_line
from harness.results import AccuracyReport, AccuracyRun, ReferenceInfo
from harness.shard import Shard
from harness.stage import Stage
from harness.target import Target, open_deployment, require_own_model, require_reference_model, served_models
from harness.task import get_task
from harness.task_api import Observed


@dataclass(frozen=True)
class AccuracyOptions:
    """What to score; defaults are the command line's."""

    dataset: Path
    report: Path
    labels: Path | None = None
    """A CSV of file,label rows labelling the images of ``dataset`` (None: its own layout)."""
    pipelines: tuple[str, ...] | None = None
    """This repository's pipelines to score (None: both, unless ``models`` are given)."""
    models: tuple[Target, ...] = ()
    """Deployed models by name (``--model``), beside the pipelines."""
    reference: str | None = None
    reference_model: str = "auto"
    batch_size: int = 8
    top_k: int = TOP_K
    fail_on: str = "diverged"
    tie_margin: float | None = None
    allow_rejected: bool = False
    shard: Shard | None = None
    """Classify only this shard's images (``harness merge`` pools the shards)."""
    task: str | None = None
    """``--task`` (None: classification for the pipelines, what discovery finds for models):
    its effect is what is measured (classification: accuracy; embedding: retrieval; detection:
    precision, recall, F1 and mAP on COCO labels)."""
    formats: tuple[str, ...] | None = None
    """``--format`` (None: accuracy.json and accuracy.md; accuracy.json always)."""
    postprocess: str | None = None
    """``FILE.py:NAME``: the user's postprocessing of a detector's raw output (None: the spec's)."""


@dataclass(frozen=True)
class AccuracyResult:
    """``harness accuracy``, written: the report (of any task) and its files."""

    report: AccuracyReport
    json_path: Path
    markdown_path: Path | None
    """None when ``--format`` left Markdown out."""
    options: AccuracyOptions
    files: Mapping[str, Path] = field(default_factory=dict)
    """Every file written, by name (``json``, ``markdown``, or the format: ``junit``)."""

    def left_out(self) -> tuple[int, int]:
        """(images left out of every path, images in the dataset)."""
        return len(self.report.failed), len(self.report.dataset.samples)

    def exit_status(self) -> int:
        """The report's own verdict (:attr:`AccuracyReport.passed`: 1 when a deployed path changes
        a result beyond the tie margin, any with ``fail_on`` tie, or an image is rejected by one side
        only unless allowed); raises :class:`NothingCompared` when no image was processed on every
        path (a shard that holds no image passes: the merged report is the verdict)."""
        report = self.report
        if not report.evaluated and (report.dataset.samples or self.options.shard is None):
            why = next(iter(report.failed.values()), "")
            raise NothingCompared(f"none of the {len(report.dataset.samples)} images of {self.options.dataset} could be "
                                  f"{report.processed} on every path" + (f" ({why})" if why else ""))
        return EXIT_OK if report.passed else EXIT_FOUND


@report_locked
def run(session, options: AccuracyOptions, log: Callable[[str], None] = lambda line: None,
        progress: Progress = no_progress) -> AccuracyResult:
    """Read every image of ``options.dataset`` on the reference and on every deployed path as the
    task says, score them with the task's effect, write accuracy.json and accuracy.md to ``options.report``."""
    require_formats(options.formats)
    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {options.batch_size}")
    if options.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {options.top_k}")
    pipelines = tuple(dict.fromkeys(options.pipelines if options.pipelines is not None
                                    else () if options.models else PIPELINES))
    require_reference_model(options.models, options.reference_model)
    known = options.task or next((t.task for t in options.models if t.task), None) or (
        get_task(None).name if not options.models else None)

    def load(name: str):
        """The dataset (labels: the model's classes, a retrieval set's own, a detection set's
        boxes: the task's :attr:`~harness.task_api.Task.labeled_by`) and the reference model."""
        task = get_task(name)
        full = load_dataset(options.dataset, session.classes() if task.labeled_by == "classes" else None, options.labels)
        wanted = LABEL_LAYOUTS.get(task.labeled_by)
        if full.layout != wanted and (wanted or full.layout in LABEL_LAYOUTS.values()):
            given = {"coco": "COCO detection", "masks": "segmentation (a folder of masks)"}.get(full.layout, full.layout)
            raise UsageError(f"{options.dataset}: a {given} dataset, but the task is {name}: a detector is scored on "
                             "COCO JSON labels (--task detection), a segmenter on a folder of masks given as --labels "
                             "(--task segmentation), other tasks on labeled images")
        return full, session.reference_model(options.reference_model, task=name)

    full, reference_model = load(known) if known else (None, None)  # a DatasetError exits 2 (harness.errors)
    session.tie_margin(options.tie_margin)  # a negative --tie-margin fails before a server starts
    recipe = session.recipe(options.reference)

    start = time.perf_counter()
    targets = [Target(pipeline, task=options.task) for pipeline in pipelines] + list(options.models)
    with session.connect(log=log, models=served_models(targets)) as client:
        server = session.server_info(client)
        server_metadata = client.server_metadata()
        probes = [s.path for s in full.samples] if full else _probe_images(options.dataset, options.labels)
        deployments = [session.deployment(client, pipeline, task=options.task) for pipeline in pipelines] + [
            open_deployment(session, client, dataclasses.replace(target, task=target.task or options.task), probes, log,
                            recipe, reference_model)
            for target in options.models]
        task = deployments[0].task
        mixed = sorted({f"{d.label} ({d.task.name})" for d in deployments if d.task is not task})
        if mixed:
            raise UsageError(f"the paths scored together serve different tasks: {deployments[0].label} "
                             f"({task.name}) and {', '.join(mixed)}; give --task or score them apart")
        if full is None:
            full, reference_model = load(task.name)
        for target in options.models:
            require_own_model(session, client, target, options.reference_model, reference_model, recipe, probes, task.name)
        if options.shard is not None and task.unshardable:
            raise UsageError(f"--shard: {task.name}'s effect cannot be scored a shard at a time ({task.unshardable}); "
                             "score the whole set in one run")
        dataset = shard_dataset(full, options.shard) if options.shard else full
        recipe, reading = proven_reference(recipe, [s.path for s in dataset.samples])  # a training definition: proven on these
        sides = [DeployedSide(deployment, session.client_factory(client)) for deployment in deployments]
        task = deployments[0].configure_task(session.spec, options.postprocess)
        for d in deployments[1:]:
            d.configure_task(session.spec, options.postprocess)
        tie_margin = session.tie_margin(options.tie_margin, task.effect_margin_kind or deployments[0].scores_kind, task)
        # How each path is read is the task's to say (Task.effect_from); what it scores, its Task.effect_on.
        failed, observed = READERS[task.effect_from](task, dataset.samples, recipe, reference_model, sides, options,
                                                     tie_margin, progress)

    classes = session.classes() if task.labeled_by == "classes" else dataset.label_names
    report = score(task, dataset, failed, observed, tie_margin, classes, options.top_k,
                   models=tuple(side.deployment.model for side in sides),
                   reference=ReferenceInfo(recipe.describe(), reference_model.name, recipe.name, reading),
                   server=server, spec=session.spec.source, versions=versions(server_metadata),
                   run=AccuracyRun(round(time.perf_counter() - start, 2), options.batch_size, options.fail_on,
                                   options.allow_rejected, tie_margin, options.top_k))
    files = write_accuracy_files(options.report, report, options.formats)
    if options.shard is not None:
        write_shard(options.report, options.shard, full, dataset, observed["predictions"], classes)
    return AccuracyResult(report, files["json"], files.get("markdown"), options, files)


def score(task, dataset: Dataset, failed: Mapping[str, Mapping[str, str]], observed: Mapping, margin: float,
          classes: Sequence[str], k: int, **context) -> AccuracyReport:
    """The one scoring of every task (``harness accuracy``'s and ``harness merge``'s): each image
    some path failed left out of every path (``failed``: path -> image -> why, the reference
    first), then the task's :meth:`~harness.task_api.Task.effect_on` of what every path read
    (``observed``: :class:`~harness.task_api.Observed`'s fields) on the images left; ``context``:
    the report's fields that say what produced it (models, reference, server, spec, run, versions)."""
    paths = tuple(failed)
    reasons = {s.name: "; ".join(f"{p}: {failed[p][s.name]}" for p in paths if s.name in failed[p])
               for s in dataset.samples}
    failures = {name: why for name, why in reasons.items() if why}
    outcomes = {name: str(outcome_of(name in failed[paths[0]], [name in failed[p] for p in paths[1:]]))
                for name in failures}
    evaluated = tuple(s for s in dataset.samples if s.name not in failures)
    effect = task.effect_on(Observed(dataset, evaluated, paths, margin, classes, k, **observed)) if evaluated else None
    for name, why in getattr(effect, "unlabeled", {}).items():  # a label that cannot be used: its image's error row
        failures[name] = f"label: {why}"
        outcomes[name] = str(Outcome.FAILED)  # the same on every path: no side rejected it
    scored = getattr(effect, "evaluated", None)  # an effect that decides which images it scored
    if scored is not None:
        evaluated = tuple(s for s in evaluated if s.name in scored)
    return AccuracyReport(task.name, effect, dataset, evaluated, failures, outcomes, paths[1:], **context,
                          processed=task.processed_word)


def _read_outputs(task, samples, recipe, reference_model, sides, options: AccuracyOptions, margin: float, progress,
                  keep_outputs: bool = True):
    """Every path's top-k classes and raw output of every image, a batch at a time (the reference
    in-process, each deployed path through the server); ``keep_outputs`` False: the deployed paths'
    top-k only (the reference keeps its logits always: the tie margins)."""
    with progress(len(samples) * (1 + len(sides)), task.progress_word) as advance:
        predictions = [predict_reference(samples, recipe, reference_model, options.batch_size,
                                         on_image=lambda name: advance(f"reference {name}"), k=options.top_k)]
        for side in sides:
            label = side.deployment.label
            predictions.append(predict_deployed(samples, side, options.batch_size, keep_outputs=keep_outputs,
                                                on_image=lambda name, p=label: advance(f"{p} {name}"), k=options.top_k))
    return {p.path: p.failed for p in predictions}, {"predictions": predictions}


def _probe_images(dataset: Path, labels: Path | None = None) -> list[Path]:
    """Images to probe a ``--model`` with before the dataset's labels are read (its task decides how):
    a CSV's or a COCO JSON's own images (never the label file itself), a folder's first images."""
    if dataset.is_file() or labels is not None:
        return [s.path for s in load_dataset(dataset, None, labels).samples[:5]]  # labels read as names only
    folder = dataset
    found = list_images(folder) or [p for d in sorted(folder.iterdir()) if d.is_dir() for p in list_images(d)]
    return found[:5]


LABEL_LAYOUTS = {"boxes": "coco", "masks": "masks"}
"""A task's :attr:`~harness.task_api.Task.labeled_by` -> the dataset layout that labels it so."""
DETECT_WORKERS = 4
"""Images in flight while detecting: the server works on some while the reference runs others."""


def _read_results(task, samples, recipe, reference_model, sides, options: AccuracyOptions, margin: float, progress):
    """Every path's stages of every image up to the result stage (the reference's by its
    postprocessing, each deployment's as it answers it), and each deployed path's changes against
    the reference's, as check judges them (near-threshold ones within ``margin``)."""
    from concurrent.futures import ThreadPoolExecutor

    def reference_boxes(sample):
        stages = recipe(read_sample(sample))
        stages[Stage.OUTPUT] = reference_model.logits(stages[Stage.INPUT][None])[0]
        stages.update(task.derive_reference(stages))
        return stages

    def deployed_boxes(side, sample, reference):
        stages = side.read(sample.name, read_sample(sample))
        stages.update(side.deployment.task.derive_deployed(stages, reference or {}))
        return stages

    def attempt(fn, *args):
        try:
            return fn(*args), None
        except Exception as exc:  # noqa: BLE001 - one image's failure on one path is that image's row
            return None, one_line(exc)

    paths = ["reference", *(side.deployment.label for side in sides)]
    failed: dict[str, dict] = {p: {} for p in paths}
    references: dict[str, dict] = {}
    deployed: dict[str, dict] = {p: {} for p in paths[1:]}
    with progress(len(samples) * len(paths), task.progress_word) as advance, ThreadPoolExecutor(DETECT_WORKERS) as pool:
        for sample, (stages, error) in zip(samples, pool.map(lambda s: attempt(reference_boxes, s), samples)):
            advance(f"reference {sample.name}")
            if error:
                failed["reference"][sample.name] = error
            else:
                references[sample.name] = stages
        for side, path in zip(sides, paths[1:]):
            answers = pool.map(lambda s, side=side: attempt(deployed_boxes, side, s, references.get(s.name)), samples)
            for sample, (boxes, error) in zip(samples, answers):
                advance(f"{path} {sample.name}")
                if error:
                    failed[path][sample.name] = error
                else:
                    deployed[path][sample.name] = boxes
    changes = []
    for path in paths[1:]:  # each image's result against the reference's, as check judges it
        verdicts = {}
        for name, stages in deployed[path].items():
            if name in references:
                result = task.result_of(references[name], stages, {}, margin, 0)
                if result.verdict.value in ("tie", "diverged"):
                    verdicts[name] = result.verdict.value
        changes.append(verdicts)
    return failed, {"results": {"reference": references, **deployed}, "changes": changes}


READERS = {"top-k": functools.partial(_read_outputs, keep_outputs=False), "outputs": _read_outputs,
           "results": _read_results}
"""How ``harness accuracy`` reads every path, by :attr:`harness.task_api.Task.effect_from`."""
