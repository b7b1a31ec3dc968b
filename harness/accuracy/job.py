"""``harness accuracy`` as a job: :func:`run` takes a :class:`~harness.session.Session` and
:class:`AccuracyOptions` and returns the written report; the command line only parses into
these and prints."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.accuracy.predict import TOP_K
from harness.check.job import Progress, no_progress
from harness.client import PIPELINES
from harness.deployment.target import Target
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.results import AccuracyReport, AccuracyRun
from harness.shard import Shard


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


@dataclass(frozen=True)
class AccuracyResult:
    report: AccuracyReport
    json_path: Path
    markdown_path: Path
    options: AccuracyOptions

    def exit_status(self) -> int:
        """1 when a deployed path changes a top-1 beyond a tie (any, with ``fail_on`` tie) or an
        image is rejected by one side only (unless allowed); raises :class:`NothingCompared`
        when no image could be classified on every path."""
        result, options = self.report.result, self.options
        if not result.dataset.samples and options.shard is not None:
            return EXIT_OK  # a shard that holds no image: the merged report is the verdict
        if not result.evaluated:
            raise NothingCompared(f"none of the {len(result.dataset.samples)} images of {options.dataset} could be "
                                  "classified on every path")
        if self.report.any_rejected() and not options.allow_rejected:
            return EXIT_FOUND
        return EXIT_FOUND if self.report.any_flips(ties=options.fail_on == "tie") else EXIT_OK


def run(session, options: AccuracyOptions, log: Callable[[str], None] = lambda line: None,
        progress: Progress = no_progress) -> AccuracyResult:
    """Classify every image of ``options.dataset`` on the reference and on every deployed path,
    score them, write accuracy.json and accuracy.md to ``options.report``."""
    from harness.accuracy import evaluate, load_dataset, predict_deployed, predict_reference, write_report
    from harness.accuracy.shards import shard_dataset, write_shard
    from harness.deployment import DeployedSide
    from harness.deployment.target import open_deployment, require_reference_model
    from harness.report import versions
    from harness.results import ReferenceInfo

    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {options.batch_size}")
    if options.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {options.top_k}")
    pipelines = tuple(dict.fromkeys(options.pipelines if options.pipelines is not None
                                    else () if options.models else PIPELINES))
    require_reference_model(options.models, options.reference_model)
    classes = session.classes()
    full = load_dataset(options.dataset, classes, options.labels)  # a DatasetError exits 2 (harness.errors)
    dataset = shard_dataset(full, options.shard) if options.shard else full
    tie_margin = session.tie_margin(options.tie_margin)
    recipe = session.recipe(options.reference)
    reference_model = session.reference_model(options.reference_model)

    start = time.perf_counter()
    samples, k = dataset.samples, options.top_k
    with session.connect(log=log) as client:
        server = session.server_info(client)
        server_metadata = client.server_metadata()
        images = [s.path for s in samples]
        deployments = [session.deployment(client, pipeline) for pipeline in pipelines] + [
            open_deployment(session, client, target, images, log, recipe, reference_model) for target in options.models]
        sides = [DeployedSide(deployment, session.client_factory(client)) for deployment in deployments]
        with progress(len(samples) * (1 + len(sides)), "classifying") as advance:
            predictions = [predict_reference(samples, recipe, reference_model, options.batch_size,
                                             on_image=lambda name: advance(f"reference {name}"), k=k)]
            for side in sides:
                label = side.deployment.label
                predictions.append(predict_deployed(samples, side, options.batch_size,
                                                    on_image=lambda name, p=label: advance(f"{p} {name}"), k=k))

    report = AccuracyReport(
        evaluate(dataset, predictions, classes, tie_margin, k), classes,
        ReferenceInfo(recipe.describe(), reference_model.name, recipe.name),
        server, session.spec.source,
        AccuracyRun(round(time.perf_counter() - start, 2), options.batch_size, options.fail_on, options.allow_rejected),
        versions(server_metadata))
    json_path, markdown_path = write_report(options.report, report)
    if options.shard is not None:
        write_shard(options.report, options.shard, full, dataset, predictions, classes)
    return AccuracyResult(report, json_path, markdown_path, options)
