"""``harness diagnose`` as a job: :func:`run` takes a :class:`~harness.session.Session` and
:class:`DiagnoseOptions`, reads the deployed side once, searches, and returns the written
diagnosis; the command line only parses into these and prints."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from harness.check.job import Progress, no_progress
from harness.check.rundir import report_locked
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, ServerStopped, UsageError
from harness.target import Target
from harness.task import get_task

if TYPE_CHECKING:
    from harness.results import DiagnosisReport

DEPLOYED_LIBRARY = {"dali": "DALI", "opencv": "OpenCV"}
"""This repository's pipelines -> the library their advice names."""


@dataclass(frozen=True)
class DiagnoseOptions:
    """What a diagnosis is asked to do; defaults are the command line's."""

    images: Path
    report: Path
    target: Target = field(default_factory=Target)
    reference: str | None = None
    """A built-in recipe (None: the spec's): diagnose varies its parameters."""
    reference_model: str = "auto"
    write_spec: Path | None = None
    """Where to write the deployment spec: the reference as the deployment behaves, every cause
    applied (None: not written)."""
    write_training_spec: Path | None = None
    """Where to write the training as it is: a training callable's fingerprint (None: not written)."""
    tie_margin: float | None = None
    allow_rejected: bool = False
    formats: tuple[str, ...] | None = None
    """``--format`` (None: diagnosis.json and diagnosis.md)."""


@dataclass(frozen=True)
class DiagnoseResult:
    report: "DiagnosisReport"
    paths: dict[str, Path]
    """``markdown`` and ``json`` (those ``--format`` chose, and any other by its format: ``junit``)."""
    written_spec: Path | None
    """The deployment spec written (``--write-spec``)."""
    options: DiagnoseOptions
    written_training_spec: Path | None = None
    """The training spec written (``--write-training-spec``)."""

    def exit_status(self) -> int:
        """Check's rule on check's verdict of the same images (:mod:`harness.errors`): 1 where
        ``harness check`` exits 1 (a stage or an event diverged, or an image only one side
        processes, unless allowed), explained or not; else 0."""
        return EXIT_OK if self.report.passed else EXIT_FOUND


@contextlib.contextmanager
def _quiet_status(text: str):
    yield lambda text: None


@report_locked
def run(session, options: DiagnoseOptions, log: Callable[[str], None] = lambda line: None,
        progress: Progress = no_progress, status=_quiet_status) -> DiagnoseResult:
    """Diagnose ``options.images`` and write ``diagnosis.md``/``.json`` to ``options.report``.
    ``status(text)``: a context yielding ``update(text)`` for the search's phases. Raises
    :class:`~harness.errors.UsageError` for bad options, :class:`~harness.errors.ServerStopped`
    when the server stops answering while the deployed side is read (nothing is diagnosed),
    :class:`~harness.errors.NothingCompared` when no image could be compared.

    A training callable (``options.reference`` ``file.py:name``) is first fingerprinted
    (:mod:`harness.diagnose.training`): the deployment is diagnosed against the spec that
    reproduces it, and compared with the callable itself."""
    from harness.check.image import ImageChecker
    from harness.deployment import DeployedSide
    from harness.diagnose import SCREEN_IMAGES, Diagnoser, diagnose, fetch_deployed, reference_toml
    from harness.diagnose.advice import fingerprint, reference_table
    from harness.diagnose.caches import CachedModel, LogitsCache
    from harness.diagnose.training import fingerprint_training
    from harness.listing import list_inputs
    from harness.outcome import Outcome
    from harness.reference import BUILT_IN
    from harness.reference.model import CHOICES, TorchModel
    from harness.reference.reading import proven_reference
    from harness.report.data import versions
    from harness.report.diagnosis import write_diagnosis
    from harness.report.formats import require_formats
    from harness.results import CombinedChange, DeployedInfo, DiagnosisReport, ReferenceInfo
    from harness.results.summary import ImageIssue
    from harness.spec import SpecError
    from harness.target import open_deployment, require_own_model, require_reference_model

    require_formats(options.formats)
    started = time.perf_counter()
    spec = session.spec
    choice = options.reference or spec.reference.recipe
    reference = session.recipe(options.reference)  # a built-in recipe, or the user's training code
    training = None if choice in BUILT_IN else reference  # the user's callable or Compose
    listing = list_inputs(options.images)
    images = [file.path for file in listing.inputs]
    # what check runs: a training definition proven on these files is replayed as the spec read from it
    checked, reading = proven_reference(reference, images)
    # every entry a row, as check lists them: what is not an image is listed with why
    skipped = tuple(ImageIssue(s.name, s.reason, Outcome.SKIPPED) for s in listing.skipped)
    if not images:
        first = f" (all {len(skipped)} entries skipped; {skipped[0].image}: {skipped[0].reason})" if skipped else ""
        raise UsageError(f"no images in {options.images}{first}")
    target = options.target
    require_reference_model([target], options.reference_model)
    session.tie_margin(options.tie_margin)  # a negative --tie-margin fails before a server starts

    def load_model(task: str):
        # One intra-op thread: the search preprocesses one image per core, and torch's thread pool
        # spends more time waking up than working on one image's small tensors.
        loaded = session.reference_model(options.reference_model, threads=1, task=task)
        loaded.check_input(spec.reference.preprocess.input_shape)
        return loaded

    # The user's model file is the same whatever the task; this repository's model is the task's.
    known = target.task or (get_task(None).name if target.model is None or options.reference_model not in CHOICES
                            else None)
    model = load_model(known) if known else None  # else once discovery found the task
    foreign = target.model is not None

    def fp16_model():
        if options.reference_model not in CHOICES:
            raise SpecError("the fp16 hypothesis runs this repository's PyTorch model, not --reference-model FILE")
        if not isinstance(model, TorchModel):
            raise SpecError("the fp16 hypothesis needs the PyTorch model (--reference-model torch)")
        return TorchModel(half=True)

    read_start = time.perf_counter()
    with session.connect(log=log, models=target.served_models()) as client:
        server = session.server_info(client)
        deployment = open_deployment(session, client, target, images, log, checked, model)
        task = deployment.configure_task(spec, target.postprocess)
        model = model or load_model(task.name)
        require_own_model(session, client, target, options.reference_model, model, checked, images, task.name)
        # A deployment answering probabilities is judged in probability units (:mod:`harness.scores`).
        tolerances = session.tolerances(deployment.scores_kind, task)
        tie_margin = session.tie_margin(options.tie_margin, deployment.scores_kind, task)
        side = DeployedSide(deployment, session.client_factory(client))
        # check's verdict, by check's own code on the same inputs: where the diagnosis starts from
        logits = LogitsCache()
        checker = ImageChecker(side, checked, CachedModel(model, logits), tolerances, tie_margin=tie_margin)
        with progress(len(images), "checking, and reading the deployed stages") as advance:
            try:
                deployed = fetch_deployed(checker, listing.inputs, listing.skipped, on_image=advance)
            except ServerStopped as exc:
                raise exc.then("Nothing was diagnosed; run diagnose again once the server answers") from None
    read_seconds = time.perf_counter() - read_start
    if not deployed.names:
        raise NothingCompared(f"no image could be compared: the deployment answered none of the {len(images)} "
                              f"({deployed.failed[0].image}: {deployed.failed[0].reason})")
    search_start = time.perf_counter()
    recipe, reference_spec, fingerprinted = spec.reference.recipe, spec.reference.preprocess, None
    if training is not None:
        # the search starts from what the training definition was read as (--reference hf:..., a Compose), else the spec's
        read = training.reading.read if training.reading is not None else None
        start = (read.recipe, read.preprocess) if read is not None else (
            spec.reference.recipe if spec.reference.recipe in BUILT_IN else "opencv", spec.reference.preprocess)
        with status("fingerprinting the training callable") as update:
            fingerprinted = fingerprint_training(
                training, options.reference, deployed.names, deployed.data, *start,
                spec.preprocess, model, session.tolerances(), fp16_model, session.tie_margin(), progress=update)
        recipe, reference_spec = fingerprinted.recipe, fingerprinted.preprocess
    elif options.reference:
        recipe = options.reference
    diagnoser = Diagnoser(deployed, recipe, reference_spec, spec.preprocess, model, tolerances, fp16_model,
                          tie_margin=tie_margin, scores=deployment.scores_kind, task=task, logits=logits)
    compared = None

    def verify(causes):  # check's comparison of the same images against the corrected spec
        return check_corrected(diagnoser, causes, checker, spec, target.postprocess)

    try:
        with status("diagnosing") as update:
            result = diagnose(diagnoser, None if foreign else str(session.repository / session.spec_name),
                              deployment.label if foreign else DEPLOYED_LIBRARY[target.pipeline], progress=update,
                              verify=verify)
            if training is not None:  # the callable itself against the deployment, as it is
                compared = diagnoser.evaluate_recipe(training, options.reference)
    finally:
        diagnoser.close()
    if not diagnoser.indices:
        raise NothingCompared(f"no image could be compared: the reference recipe rejected all {len(deployed.names)} "
                              f"images the deployment answered ({diagnoser.rejected_by_training[0].reason})")
    final_recipe, final_preprocess, fp16, bgr_images, final_postprocess = diagnoser.setting(
        [c.hypothesis for c in result.causes])
    note = " ".join(
        (["The model-precision cause (fp16) cannot be written in a spec: the output stays different."] if fp16 else [])
        + (["The deployment's image stages are in BGR order (the decoder's, kept): a spec holds only the model "
            "input's order, so its image stages stay different."] if bgr_images else []))
    final_postprocess = dict(final_postprocess)
    table = reference_table(spec, final_recipe, final_preprocess, final_postprocess)
    change = CombinedChange(table, reference_toml(spec, final_recipe, final_preprocess, final_postprocess), note or None,
                            unchanged=table == {"recipe": spec.reference.recipe})
    written, not_written = _write_spec(options.write_spec, spec, session.spec_path, result,
                                       (final_recipe, final_preprocess, final_postprocess), change)
    training_written, training_not_written = _write_training_spec(options.write_training_spec, spec, session.spec_path,
                                                                  fingerprinted)
    timing = {"reading the deployed side": read_seconds, **dict(diagnoser.timing),
              "search (all phases)": time.perf_counter() - search_start,
              "total": time.perf_counter() - started}
    report = DiagnosisReport(
        result, len(images), (*deployed.failed, *diagnoser.rejected_by_training), SCREEN_IMAGES,
        ReferenceInfo(fingerprinted.name if fingerprinted else recipe, model.name, reading=reading), deployment.model, server,
        change,
        spec.source, str(written) if written else None, diagnoser.tie_margin,
        {k: round(v, 3) for k, v in timing.items()}, dict(diagnoser.counts), versions(),
        fingerprint(final_recipe, final_preprocess) if result.causes else None,
        tuple(DeployedInfo.of(deployment, server).found) if foreign else (),
        deployment.scores_kind.name, not_written, fingerprinted, compared, options.allow_rejected, skipped,
        str(training_written) if training_written else None, training_not_written)
    return DiagnoseResult(report, write_diagnosis(options.report, report, options.formats), written, options,
                          training_written)


def check_corrected(diagnoser, causes, checker, spec, postprocess: str | None):
    """Check's comparison (:meth:`harness.check.image.ImageChecker.replay`, no server) of every
    image the search ran on against the reference with ``causes`` applied, as the corrected
    spec says it (:func:`harness.diagnose.advice.corrected`), folded into check's verdict; None
    where a spec cannot say a cause (the model in fp16, BGR image stages)."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.check.image import ImageChecker
    from harness.compare.aggregate import RunSummary
    from harness.diagnose.advice import corrected
    from harness.diagnose.evaluation import DEFAULT_WORKERS
    from harness.diagnose.findings import CheckVerdict
    from harness.reference import load_recipe

    recipe, preprocess, fp16, bgr_images, postprocessing = diagnoser.setting(causes)
    if fp16 or bgr_images:
        return None
    fixed = corrected(spec, recipe, preprocess, dict(postprocessing))  # what check reads of the written spec
    task = checker.task.configure(fixed, postprocess)
    replayer = ImageChecker(checker.side, load_recipe(fixed), checker.reference_model, checker.tolerances, False,
                            checker.top_k, tie_margin=checker.tie_margin, task=task)
    deployed, summary = diagnoser.deployed, RunSummary(events=task.events(checker.tie_margin))
    with ThreadPoolExecutor(DEFAULT_WORKERS) as pool:
        for result, _ in pool.map(lambda i: replayer.replay(deployed.names[i], deployed.data[i], deployed.answered[i]),
                                  diagnoser.indices):
            summary.add(result)
    return CheckVerdict.of(summary.result(), task.result_stage)


def _write_spec(out: Path | None, spec, spec_path: Path, result, final: tuple, change):
    """(the deployment spec written, or None; why nothing was written, or None). ``--write-spec``
    writes the training reference as the deployment behaves (every cause applied: the reference
    ``harness check --spec`` then passes with) when causes were found that a spec can say
    (``change``, the :class:`~harness.results.CombinedChange`); nothing else: a spec holding no
    cause would be a guess, and one holding only the recipe it extends says nothing."""
    from harness.diagnose import corrected_spec

    if out is None:
        return None, None
    if not result.causes:
        why = ("nothing diverged" if result.first_divergent is None else "no known culprit explains the divergence")
        return None, f"--write-spec: nothing written to {out}: {why}, so there is no correction to write"
    if change.unchanged:
        return None, (f"--write-spec: nothing written to {out}: no cause found can be said in a spec "
                      f"({change.note or 'they change nothing the spec holds'})")
    recipe, preprocess, postprocess = final
    return corrected_spec(spec, spec_path, recipe, preprocess, [c.hypothesis for c in result.causes], out,
                          change.note or "", postprocess=postprocess), None


def _write_training_spec(out: Path | None, spec, spec_path: Path, fingerprinted):
    """(the training spec written, or None; why not, or None). ``--write-training-spec`` writes
    your training as it is: a training callable's fingerprint, when a spec reproduces it."""
    from harness.diagnose import corrected_spec

    if out is None:
        return None, None
    if fingerprinted is None:
        return None, (f"--write-training-spec: nothing written to {out}: no training code was given (--reference "
                      "FILE.py:NAME, torchvision:, timm:, hf:): the spec's [reference] is the training already")
    if not fingerprinted.reproduced:
        return None, (f"--write-training-spec: nothing written to {out}: no spec reproduces the training callable "
                      f"{fingerprinted.name} (see the fingerprint)")
    header = f"the [reference] below is the training callable {fingerprinted.name} as a spec: with it, " + (
        "every stage it gives is equal or close on every image")
    return corrected_spec(spec, spec_path, fingerprinted.recipe, fingerprinted.preprocess,
                          [c.hypothesis for c in fingerprinted.diagnosis.causes], out, header=header), None
