"""``harness check`` as a job: :func:`run` takes a :class:`~harness.session.Session` and
:class:`CheckOptions` and returns the written :class:`~harness.results.CheckReport`; the
command line only parses into these and prints (any other front end can call it too)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

from harness.check.budget import DEFAULT_MEMORY_BUDGET, MemoryBudget, resized_by
from harness.check.image import ImageChecker
from harness.check.run import run_check
from harness.check.rundir import RunDirectory, RunManifest
from harness.deployment import DeployedSide
from harness.deployment.side import RETRIES
from harness.deployment.side import RETRIES as DEFAULT_RETRIES
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, RunStopped, StopSignals, UsageError
from harness.files import strict_json
from harness.listing import list_inputs
from harness.model import ModelError
from harness.names import path_text
from harness.paths import DEFAULT_REPOSITORY
from harness.reference.model import CHOICES
from harness.reference.reading import proven_reference
from harness.report import versions, write_reports
from harness.report.formats import require_formats
from harness.results import CheckReport, CheckRun, DeployedInfo, ReferenceInfo, SpecInfo
from harness.session import DEFAULT_TIMEOUT
from harness.shard import Shard, ShardRecord
from harness.stage import DEFAULT_TOP_K, Stage
from harness.target import Target, open_deployment, require_own_model, require_reference_model
from harness.task import get_task
from harness.validation import require_int, require_number
from harness.verdict import FAIL_ON

if TYPE_CHECKING:
    from harness.results import CheckReport

DEFAULT_WORKERS = min(8, 2 * (os.cpu_count() or 1))
"""Images in flight: while some wait for the server, others compute (twice the cores, at most 8)."""

Progress = Callable[[int, str], ContextManager[Callable[[str], None]]]
"""``progress(total, description)`` -> a context yielding ``advance(status)``."""


@contextlib.contextmanager
def no_progress(total: int, description: str):
    yield lambda status="": None


MAX_WORKERS = 64
MAX_RETRIES = 20


@dataclass(frozen=True)
class CheckOptions:
    """What a check is asked to do; defaults are the command line's. :meth:`validate` checks
    every value (type, range, finiteness) before any work."""

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
    follow_links: bool = False
    """Follow symbolic links leading outside the image folder (default: skipped, with why)."""
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    """Bytes the images in flight may hold, by their estimated decoded size (harness.check.run)."""
    shard: Shard | None = None
    """Check only this shard's images (``harness merge`` joins the shards' reports)."""
    formats: tuple[str, ...] | None = None
    """``--format``: the report formats written (None: today's files; the run's records always,
    :data:`harness.report.CHECK_REPORTS`)."""
    log_reading: bool = True
    """Log how a training definition was read before the run (False where the caller says it
    itself: ``harness deploy``'s summary)."""

    def validate(self) -> None:
        """:class:`UsageError` naming the first value out of its type or range."""
        require_int("--top-k", self.top_k, 1)
        require_int("--workers", self.workers, 1, MAX_WORKERS)
        require_int("--retries", self.retries, 0, MAX_RETRIES)
        require_int("--memory-budget", self.memory_budget, 2 ** 20)
        if self.tie_margin is not None:
            require_number("--tie-margin", self.tie_margin, 0)
        if self.fail_on not in FAIL_ON:
            raise UsageError(f"--fail-on must be one of {', '.join(FAIL_ON)}, got {self.fail_on!r}")

        require_formats(self.formats)


@dataclass(frozen=True)
class CheckResult:
    """A finished (or stopped) check whose reports are written."""

    report: "CheckReport"
    paths: dict[str, Path]
    """The files written: ``markdown``, ``html``, ``json``, ``csv`` (per_image.csv), and any
    other ``--format`` by its name (``junit``)."""
    options: CheckOptions
    stopped: RunStopped | None = None
    """Why the run ended before every image (None: it did not)."""
    resume_command: str = ""
    """The command that continues this run (printed when it stopped)."""

    def exit_status(self) -> int:
        """0 nothing the options forbid, 1 found; raises :class:`RunStopped` (the server
        stopped, a signal, a full disk: with how to go on) or :class:`NothingCompared`: the
        statuses of :mod:`harness.errors`."""
        summary, options = self.report.summary, self.options
        if self.stopped is not None:
            raise self.stopped.then(f"{summary.compared} images compared so far are kept; continue with: "
                                    f"{self.resume_command}")
        if not summary.images and options.shard is not None:
            return EXIT_OK  # a shard that holds no image: the merged report is the verdict
        if not summary.compared:
            raise NothingCompared(f"none of the {summary.images} images could be compared "
                                  "(every one failed or was rejected): the run says nothing about the deployment")
        return EXIT_FOUND if self.report.fails(options.fail_on, options.allow_rejected) else EXIT_OK


def run(session, options: CheckOptions, log: Callable[[str], None] = lambda line: None,
        progress: Progress = no_progress) -> CheckResult:
    """Check every entry of ``options.images`` (:func:`harness.listing.list_inputs`: the
    entries that are not inputs are skipped rows) and write the reports to ``options.report``,
    a run directory this run locks (:mod:`harness.check.rundir`); also when the run stops
    early (the server, SIGINT/SIGTERM, a full disk): what was compared is kept. Raises
    :class:`~harness.errors.UsageError` before anything runs for bad options, and for a
    ``--resume`` of a run that was something else; see :meth:`CheckResult.exit_status`."""
    options.validate()
    spec = session.spec
    listing = list_inputs(options.images, options.follow_links)
    if not listing.inputs:
        first = f" (all {len(listing.skipped)} entries skipped; {listing.skipped[0].name}: {listing.skipped[0].reason})" \
            if listing.skipped else ""
        raise UsageError(f"no images in {path_text(options.images)}{first}")
    listed = listing
    if options.shard is not None:  # every entry, skipped ones too, is in exactly one shard
        listing = replace(listing, inputs=tuple(options.shard.select(listing.inputs)),
                                      skipped=tuple(options.shard.select(listing.skipped)))
    require_reference_model([options.target], options.reference_model)
    recipe = session.recipe(options.reference)
    session.tie_margin(options.tie_margin)  # a negative --tie-margin fails before a server starts
    hint = resume_command(session, options)
    recipe, reading = proven_reference(recipe, [f.path for f in listing.inputs])  # a training definition: proven on these
    if reading and options.log_reading:
        log(f"reference {reading}")

    with RunDirectory(options.report) as run_dir:
        manifest = run_manifest(session, options, recipe.name)
        if options.resume:
            if not run_dir.has_results():
                raise UsageError(f"--resume: no earlier run in {path_text(options.report)}")
            _verify(run_dir, manifest)
        def load_reference_model(task: str):
            # One thread per image, whatever --workers: a model's float sums depend on how its work is
            # split (PyTorch's logits moved by 1e-5 between 1 and 2 threads), and a run must give the
            # same numbers however it is run or resumed; the workers give the parallelism.
            model = session.reference_model(options.reference_model, threads=1, task=task)
            if Stage.CROP in recipe.stages:  # built-in recipes and Composes: their input size is known now
                model.check_input(spec.reference.preprocess.input_shape)
            return model

        # The task is known now unless discovery finds it (a --model without --task): then the
        # reference model is loaded once the deployment is found (the user's model file is the
        # same whatever the task; discovery reads its answer on the probe as evidence).
        target = options.target
        known = target.task or (get_task(None).name if target.model is None or _user_file(options.reference_model)
                                else None)
        reference_model = load_reference_model(known) if known else None

        with contextlib.ExitStack() as signal_scope:  # the stop signals' handlers, once installed
            with session.connect(log=log, models=target.served_models()) as client:
                server_metadata = client.server_metadata()
                # Discovery probes the listing's first images, a shard's too: the report a run writes.
                deployment = open_deployment(session, client, options.target, [f.path for f in listed.inputs], log,
                                             recipe, reference_model)
                manifest = manifest.served_by(server_metadata.get("version"), deployment.label)
                if options.resume:
                    _verify(run_dir, manifest)
                run_dir.write_manifest(manifest)
                task = deployment.configure_task(spec, options.target.postprocess)
                reference_model = reference_model or load_reference_model(task.name)
                require_own_model(session, client, target, options.reference_model, reference_model, recipe,
                                  [f.path for f in listed.inputs], task.name)
                tolerances = session.tolerances(deployment.scores_kind, task)
                # In the units compared: probabilities when the deployment answers them (the reference's
                # softmax), where the logits' 0.5 would call almost any changed top-1 a tie.
                tie_margin = session.tie_margin(options.tie_margin, deployment.scores_kind, task)
                side = DeployedSide(deployment, session.client_factory(client), options.retries)
                checker = ImageChecker(side, recipe, reference_model, tolerances, options.isolate, options.top_k,
                                       tie_margin=tie_margin)
                with progress(listing.entries, f"checking {deployment.label}") as advance:
                    signals = signal_scope.enter_context(StopSignals())
                    outcome = run_check(listing.inputs, checker, run_dir, options.resume, options.save_tensors,
                                        options.workers, on_result=lambda r: advance(r.image), skipped=listing.skipped,
                                        budget=MemoryBudget(options.memory_budget, resized_by(spec)), stop=signals.event,
                                        stop_reason=lambda: signals.reason, log=log, task=task, tie_margin=tie_margin)
                    # From here to the reports written (the embedded server's stop, the writing), a
                    # signal, a second Ctrl-C too, must not lose what was checked: it is only noted.
                    signals.finishing = True
                server = session.server_info(client)

            stopped = outcome.stopped
            report = CheckReport(
                summary=outcome.summary.result(), spec=SpecInfo.of(spec, tolerances), versions=versions(server_metadata),
                reference=ReferenceInfo(recipe.describe(), reference_model.name, recipe.name, reading),
                deployed=DeployedInfo.of(deployment, server, options.target.note()),
                classes=_class_names(session, options.target, task),
                run=CheckRun(round(outcome.seconds, 2), tie_margin, options.fail_on, options.isolate, options.top_k,
                             options.allow_rejected, stopped.what if stopped else None, deployment.scores_kind.name,
                             checker.answers_alike.alike))
            missing = listing.entries - report.summary.images
            if stopped is None and missing:  # every entry in is a row reported: a bug if not
                raise RuntimeError(f"{missing} entries neither compared, failed, rejected nor skipped")
            try:
                paths = write_reports(options.report, report, outcome.visuals, options.formats, check_run=True)
                if options.shard is not None:
                    ShardRecord.of(options.shard, [e.name for e in (*listed.inputs, *listed.skipped)]).write(options.report)
            except OSError as exc:
                if stopped is None:
                    raise UsageError(f"cannot write the reports in {path_text(options.report)}: "
                                     f"{exc.strerror or exc}; the records are kept: continue with: {hint}") from None
                raise stopped.then(f"the reports could not be written either ({exc.strerror or exc}); the "
                                   f"{report.summary.images} records written are kept: continue with: {hint}") from None
    return CheckResult(report, paths, options, stopped, hint)


def _class_names(session, target, task) -> tuple[str, ...]:
    """The names of the classes the scores hold: ``--class-names``, or this repository's classifier's
    for its own pipelines (a ``--model`` of the user's has other classes unless named); none for a
    task that has no classes."""
    if task.labeled_by != "classes" or (target.model is not None and session.labels is None):
        return ()
    try:
        return tuple(session.classes())
    except ModelError:  # no label file: the indices alone
        return ()


def _verify(run_dir, manifest) -> None:
    earlier = run_dir.read_manifest()
    if earlier is None:
        raise UsageError(f"--resume: {path_text(run_dir.path)} has no run manifest (run.json): it was not written by "
                         "this harness's check; start a new run in another --report")
    differences = earlier.differences(manifest, only_known=True)
    if differences:
        raise UsageError(f"--resume: {path_text(run_dir.path)} holds another run ({'; '.join(differences)}): "
                         "resume with the options it was started with, or give another --report")


def run_manifest(session, options: CheckOptions, recipe: str):
    """What this run is (:class:`~harness.check.rundir.RunManifest`): every option that
    changes a result, the spec's and the models' contents, the versions; the server's
    version and the deployment are added once connected (:meth:`RunManifest.served_by`)."""
    target = options.target
    reference_file = _user_file(options.reference_model)
    identity = {
        "images": path_text(Path(options.images).resolve()),
        "follow_links": options.follow_links,
        "shard": str(options.shard) if options.shard else None,
        "deployment": {"pipeline": None if target.model else target.pipeline, "model": target.model,
                       "output": target.output, "stages": dict(target.stages), "client": target.client,
                       "task": target.task, "postprocess": target.postprocess,
                       "client_sha256": _file_digest(Path(target.client.rpartition(":")[0])) if target.client else None},
        "server": {"url": session.url or "embedded", "protocol": session.protocol,
                   "repository": path_text(Path(session.repository).resolve())},
        "spec": {"file": path_text(Path(session.spec_path).resolve()), "sha256": _digest(strict_json(
            session.spec.raw, sort_keys=True).encode())},
        "reference": {"recipe": options.reference or recipe, "model": options.reference_model,
                      "model_sha256": _file_digest(reference_file or session.model_path(target.task)),
                      "labels": path_text(session.labels) if session.labels else None},
        "options": {"top_k": options.top_k, "isolate": options.isolate, "tie_margin": options.tie_margin,
                    "fail_on": options.fail_on, "allow_rejected": options.allow_rejected,
                    "save_tensors": options.save_tensors},
        "versions": versions(),
    }
    settings = {"workers": options.workers, "retries": options.retries, "timeout": session.timeout,
                "memory_budget": options.memory_budget}
    return RunManifest("check", identity, settings)


def _user_file(reference_model: str) -> Path | None:
    return None if reference_model in CHOICES else Path(reference_model)


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str | None:
    """The SHA-256 of a regular file; None for anything else (a device or a FIFO named as the
    reference model was read without end), which the job refuses where it loads it."""
    import hashlib

    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def resume_command(session, options: CheckOptions) -> str:
    """The whole command line that continues this run: every option that is not its
    default, paths absolute, each argument quoted for a POSIX shell (undecodable bytes as
    ``$'\\xNN'``), so following it verbatim resumes the very same run."""
    defaults = CheckOptions(options.images, options.report)
    args = ["harness", "check", _absolute(options.images), "--report", _absolute(options.report), "--resume"]
    target = options.target
    if target.model:
        args += ["--model", target.model]
    elif target.pipeline != defaults.target.pipeline:
        args += ["--pipeline", target.pipeline]
    if target.client:
        file, _, name = target.client.rpartition(":")
        args += ["--client", f"{_absolute(file)}:{name}"]
    if target.task:
        args += ["--task", target.task]
    if target.output:
        args += ["--output", target.output]
    if target.postprocess:
        file, _, name = target.postprocess.rpartition(":")
        args += ["--postprocess", f"{_absolute(file)}:{name}"]
    for step, stage in target.stages.items():
        args += ["--stage", f"{step}={stage}"]
    if session.url:
        args += ["--url", session.url]
    if session.protocol != "grpc":
        args += ["--protocol", session.protocol]
    if session.timeout != DEFAULT_TIMEOUT:
        args += ["--timeout", repr(session.timeout)]
    if Path(session.repository).resolve() != Path(DEFAULT_REPOSITORY).resolve():
        args += ["--repository", _absolute(session.repository)]
    if session.spec_file is not None:
        args += ["--spec", _absolute(session.spec_file)]
    if session.labels is not None:
        args += ["--class-names", _absolute(session.labels)]
    if options.reference is not None:
        args += ["--reference", options.reference]
    if options.shard is not None:
        args += ["--shard", str(options.shard)]
    if options.reference_model != defaults.reference_model:
        args += ["--reference-model", str(_absolute(options.reference_model)) if _user_file(options.reference_model)
                 else options.reference_model]
    valued = (("--fail-on", "fail_on"), ("--tie-margin", "tie_margin"), ("--top-k", "top_k"),
              ("--workers", "workers"), ("--memory-budget", "memory_budget"))
    for flag, name in valued:
        value = getattr(options, name)
        if value != getattr(defaults, name):
            args += [flag, str(value // 2 ** 20) if name == "memory_budget" else repr(value)]
    if options.retries != DEFAULT_RETRIES:
        args += ["--retries", str(options.retries)]
    if options.formats is not None:
        args += ["--format", ",".join(options.formats)]
    for flag, name, when in (("--allow-rejected", "allow_rejected", True), ("--save-tensors", "save_tensors", True),
                             ("--no-isolate", "isolate", False), ("--follow-links", "follow_links", True)):
        if getattr(options, name) is when:
            args.append(flag)
    return " ".join(shell_quote(a) for a in args)


def _absolute(path) -> str:
    return os.path.abspath(os.fspath(path))


def shell_quote(arg: str) -> str:
    """``arg`` for a POSIX shell: plain when safe, in single quotes when printable, else as
    ``$'...'`` with every byte that is not printable ASCII written ``\\xNN``."""
    import shlex

    raw = os.fsencode(arg)
    if all(32 <= b < 127 for b in raw):
        return shlex.quote(arg)
    return "$'" + "".join(chr(b) if 32 <= b < 127 and chr(b) not in "\\'" else f"\\x{b:02x}" for b in raw) + "'"
