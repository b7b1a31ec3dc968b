"""``harness check`` as a job: :func:`run` takes a :class:`~harness.session.Session` and
:class:`CheckOptions` and returns the written :class:`~harness.results.CheckReport`; the
command line only parses into these and prints (any other front end can call it too)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

from harness.deployment.side import RETRIES
from harness.deployment.target import Target
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, ServerStopped, UsageError
from harness.shard import Shard, ShardRecord
from harness.stage import DEFAULT_TOP_K, Stage

if TYPE_CHECKING:
    from harness.results import CheckReport

DEFAULT_WORKERS = min(8, 2 * (os.cpu_count() or 1))
"""Images in flight: while some wait for the server, others compute (twice the cores, at most 8)."""

Progress = Callable[[int, str], ContextManager[Callable[[str], None]]]
"""``progress(total, description)`` -> a context yielding ``advance(status)``."""


@contextlib.contextmanager
def no_progress(total: int, description: str):
    yield lambda status="": None


@dataclass(frozen=True)
class CheckOptions:
    """What a check is asked to do; defaults are the command line's."""

    images: Path
    report: Path
    target: Target = field(default_factory=Target)
    reference: str | None = None
    """A built-in recipe or ``file.py:name`` (None: the spec's)."""
    reference_model: str = "auto"
    """``auto``, ``torch``, ``onnx``, or the path of the user's trained model."""
    fail_on: str = "diverged"
    tie_margin: float | None = None
    """None: the output tolerance (:meth:`~harness.session.Session.tie_margin`)."""
    allow_rejected: bool = False
    top_k: int = DEFAULT_TOP_K
    save_tensors: bool = False
    resume: bool = False
    isolate: bool = True
    workers: int = DEFAULT_WORKERS
    retries: int = RETRIES
    shard: Shard | None = None
    """Check only this shard's images (``harness merge`` joins the shards' reports)."""


@dataclass(frozen=True)
class CheckResult:
    """A finished (or stopped) check whose reports are written."""

    report: "CheckReport"
    paths: dict[str, Path]
    """The files written: ``markdown``, ``html``, ``json`` (and per_image.csv beside them)."""
    options: CheckOptions
    stopped: ServerStopped | None = None
    """Why the run ended before every image (None: it did not)."""

    def exit_status(self) -> int:
        """0 nothing the options forbid, 1 found; raises :class:`ServerStopped` (with how to go
        on) or :class:`NothingCompared`: the statuses of :mod:`harness.errors`."""
        summary, options = self.report.summary, self.options
        if self.stopped is not None:
            raise self.stopped.then(f"{summary.compared} images compared so far are kept; continue with: "
                                    f"harness check {options.images} --report {options.report} --resume")
        if not summary.images and options.shard is not None:
            return EXIT_OK  # a shard that holds no image: the merged report is the verdict
        if not summary.compared:
            raise NothingCompared(f"none of the {summary.images} images could be compared "
                                  "(every one failed or was rejected): the run says nothing about the deployment")
        return EXIT_FOUND if self.report.fails(options.fail_on, options.allow_rejected) else EXIT_OK


def run(session, options: CheckOptions, log: Callable[[str], None] = lambda line: None,
        progress: Progress = no_progress) -> CheckResult:
    """Check every image of ``options.images`` and write the reports to ``options.report``
    (also when the server stopped answering: what was compared is kept). Raises
    :class:`~harness.errors.UsageError` before anything runs for bad options; see
    :meth:`CheckResult.exit_status` for the verdict."""
    from harness.check.image import ImageChecker
    from harness.check.run import run_check
    from harness.corpus import list_images
    from harness.deployment import DeployedSide
    from harness.deployment.target import open_deployment, require_reference_model
    from harness.report import versions, write_reports
    from harness.results import CheckReport, CheckRun, DeployedInfo, ReferenceInfo, SpecInfo

    spec = session.spec
    listed = list_images(options.images)
    if not listed:
        raise UsageError(f"no images in {options.images}")
    images = options.shard.select(listed) if options.shard else listed
    if options.resume and not (options.report / "images.jsonl").exists():
        raise UsageError(f"--resume: no earlier run in {options.report}")
    if options.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {options.top_k}")
    require_reference_model([options.target], options.reference_model)
    recipe = session.recipe(options.reference)
    threads = max(1, (os.cpu_count() or 1) // options.workers)

    def load_reference_model(task: str):
        model = session.reference_model(options.reference_model, threads=threads, task=task)
        if Stage.CROP in recipe.stages:  # built-in recipes and Composes: their input size is known now
            model.check_input(spec.reference.preprocess.input_shape)
        return model

    # The task is known now unless discovery finds it (a --model without --task): then the
    # reference model is loaded once the deployment is found.
    known = options.target.task or ("classification" if options.target.model is None else None)
    reference_model = load_reference_model(known) if known else None
    session.tie_margin(options.tie_margin)  # a negative --tie-margin fails before a server starts

    with session.connect(log=log) as client:
        server_metadata = client.server_metadata()
        # Discovery probes the listing's first images, a shard's too: the report a run writes.
        deployment = open_deployment(session, client, options.target, listed, log)
        task = deployment.task
        reference_model = reference_model or load_reference_model(task.name)
        tolerances = session.tolerances(deployment.scores_kind, task)
        # In the units compared: probabilities when the deployment answers them (the reference's
        # softmax), where the logits' 0.5 would call almost any changed top-1 a tie.
        tie_margin = session.tie_margin(options.tie_margin, deployment.scores_kind, task)
        side = DeployedSide(deployment, session.client_factory(client), options.retries)
        checker = ImageChecker(side, recipe, reference_model, tolerances, options.isolate, options.top_k,
                               tie_margin=tie_margin)
        with progress(len(images), f"checking {deployment.label}") as advance:
            outcome = run_check(images, checker, options.report, options.resume, options.save_tensors,
                                options.workers, on_result=lambda r: advance(r.image), task=task,
                                tie_margin=tie_margin)
        server = session.server_info(client)

    stopped = outcome.stopped
    report = CheckReport(
        summary=outcome.summary.result(), spec=SpecInfo.of(spec, tolerances), versions=versions(server_metadata),
        reference=ReferenceInfo(recipe.describe(), reference_model.name),
        deployed=DeployedInfo.of(deployment, server, options.target.note()),
        run=CheckRun(round(outcome.seconds, 2), tie_margin, options.fail_on, options.isolate, options.top_k,
                     options.allow_rejected, str(stopped) if stopped else None))
    missing = len(images) - report.summary.images
    if stopped is None and missing:  # every image in is an image reported
        raise RuntimeError(f"{missing} images neither compared nor failed")
    paths = write_reports(options.report, report, outcome.visuals)
    if options.shard is not None:
        ShardRecord.of(options.shard, [p.name for p in listed]).write(options.report)
    return CheckResult(report, paths, options, stopped)

