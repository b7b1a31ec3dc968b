"""``harness deploy`` as a job: the user's model and training definition -> a Triton model
repository of this project's own shape (validate step, DALI preprocessing with GPU decode, the
TensorRT model, the ensemble with dynamic batching, and the taps model the harness reads), proven
as far as a CPU can, then checked on photos against the same training definition.

What it writes is this repository's classification models (:func:`harness.repository.copy_models`
of the task's production ensemble and its taps model), with the user's ONNX conformed to their
contract (:func:`harness.model.conform_onnx`), the training definition read as the spec every one
of them reads, the class count and the input size set in the configs, and a compose file
building the engine and serving it (:mod:`harness.deploy.compose`). So every command reads it as
it reads this repository (``--repository DIR``), and ``harness serve --repository DIR`` serves its
cpu profile: the same DALI graph on DALI's CPU kernels, the ONNX in ONNX Runtime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.deploy.compose import compose_file
from harness.errors import EXIT_OK, UsageError
from harness.paths import TEMPLATE_REPOSITORY, packaged
from harness.spec import SPEC_FILENAME, load_spec, to_table
from harness.written import replaceable, replacing

TASKS = ("classification",)
"""The tasks deploy writes (the others' repositories have more steps: not yet)."""


@dataclass(frozen=True)
class DeployOptions:
    model: Path
    reference: str
    out: Path
    images: Path | None = None
    """Photos to check the deployment on (None: not checked)."""
    report: Path = Path("reports/deploy")
    task: str = "classification"
    class_names: Path | None = None
    name: str | None = None
    """The compose project's name (default: the folder's)."""


@dataclass(frozen=True)
class Validation:
    """The production profile proven as this repository's own is, without a GPU."""

    configs: int
    """Model configs parsed by Triton's protobuf schema."""
    dali: str
    """The DALI version whose schema every argument of the ``mixed`` pipelines is in."""
    pipelines: tuple[str, ...]
    engine_command: str
    """The engine builder's trtexec command (its dry run)."""


@dataclass(frozen=True)
class DeployResult:
    options: DeployOptions
    reading: object
    """The :class:`harness.reference.reading.Reading` deployed."""
    models: tuple[str, ...]
    validation: Validation
    classes: int
    class_names_given: bool
    model_input: object
    check: object | None = None
    """The self-check's :class:`harness.check.job.CheckResult` (None: not checked)."""
    proof: str | None = None
    seconds: dict = field(default_factory=dict)
    onnx: object = None
    """The :class:`harness.model.LoadedOnnx` read (its IR version, opset, what it was lowered from)."""

    def exit_status(self) -> int:
        return self.check.exit_status() if self.check is not None else EXIT_OK


def run(options: DeployOptions, log: Callable[[str], None] = lambda line: None, progress=None) -> DeployResult:
    """Write the deployment of ``options.model`` for ``options.reference`` into ``options.out``,
    validate its production profile, and check its cpu profile on ``options.images``."""
    from harness.model import (
        LABELS_FILENAME,
        ModelError,
        check_onnx,
        conform_onnx,
        load_for_tensorrt,
        read_classifier,
        read_labels,
        write_labels,
    )
    from harness.reference.reading import is_framework_source, read_source, read_transform
    from harness.repository import copy_models, load_config, models_of, set_class_count, set_input_size
    from harness.task import get_task  # here: loads numpy only when called

    started = time.perf_counter()
    if options.task not in TASKS:
        raise UsageError(f"--task {options.task}: deploy writes {', '.join(TASKS)} deployments (this repository's "
                         f"classify_dali and its taps model); the {options.task} repositories have steps it does not "
                         "write yet")
    if not options.model.is_file():
        raise UsageError(f"{options.model}: no such model file (deploy takes an ONNX classifier)")
    if options.model.suffix.lower() != ".onnx":
        raise UsageError(f"{options.model}: deploy builds a TensorRT engine from an ONNX file: export the model to ONNX")
    replaceable(options.out)  # refused before the rest is read (and again before it is replaced): nothing of the user's is lost
    reading = _reading(options.reference, is_framework_source, read_source, read_transform)
    read = reading.require()  # what no spec operation holds: refused by name, never approximated
    preprocess = read.preprocess
    size = tuple(preprocess.crop.size)
    # Everything read and checked before anything is written; the ONNX loaded by ONNX Runtime and held to
    # the production TensorRT's parser.
    try:
        loaded = load_for_tensorrt(options.model)
        taken = read_classifier(options.model)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    if taken.size is not None and tuple(taken.size) != size:
        raise UsageError(f"{options.model} takes {taken.size[0]}x{taken.size[1]} images; {options.reference} makes "
                         f"{size[0]}x{size[1]}: is it the model this preprocessing trained?")
    names = _class_names(options, taken.classes, read_labels)
    models = tuple(models_of(TEMPLATE_REPOSITORY, _roots(get_task(options.task))))
    source_size = tuple(load_spec(TEMPLATE_REPOSITORY / SPEC_FILENAME).preprocess.crop.size)
    table = {**to_table(preprocess), "reference": {"recipe": read.recipe}}
    header = (f"{WRITTEN_BY} from {options.reference}: {reading.framework}.\n"
              f"# Every model here reads it: the DALI pipeline (GPU decode, {_resize_words(preprocess)}),\n"
              f"# and `harness check --repository` replays it with the {read.recipe} recipe (see harness/spec.py).\n")
    # Written beside --out and put in its place only when whole and validated: a failure leaves the old one as it was.
    with replacing(options.out, "harness deploy") as written:
        folder = written.folder
        copy_models(TEMPLATE_REPOSITORY, folder, models, table, header)
        classifier = folder / get_task(options.task).repository.model
        try:
            model_input = conform_onnx(options.model, classifier / "model.onnx", size, loaded.model)
        except ModelError as exc:
            raise UsageError(str(exc)) from None
        write_labels(classifier / LABELS_FILENAME, names)
        check_onnx(classifier / "model.onnx", size, labels=names)
        set_class_count(folder, len(names))
        set_input_size(folder, source_size, size)
        (folder / "docker-compose.yml").write_text(_compose(written.out, models, options.name))
        validated = time.perf_counter()
        validation = validate(folder, models)
        assert load_config(classifier / "config.pbtxt").platform == "tensorrt_plan"
    out = options.out
    seconds = {"write": round(validated - started, 2), "validate": round(time.perf_counter() - validated, 2)}
    result = DeployResult(options, reading, models, validation, len(names), options.class_names is not None, model_input,
                          seconds=seconds, onnx=loaded)
    if options.images is None:
        return result
    checked = time.perf_counter()
    check = self_check(out, options, log, progress)
    seconds["check"] = round(time.perf_counter() - checked, 2)
    seconds["total"] = round(time.perf_counter() - started, 2)
    return DeployResult(options, reading, models, validation, len(names), options.class_names is not None, model_input,
                        check, check.report.reference.reading, seconds, loaded)


WRITTEN_BY = "# Written by `harness deploy`"
"""The first words of the spec deploy writes, for its reader: what deploy may replace is decided by the
folder's record (:mod:`harness.written`), never by these words."""


def _class_names(options: DeployOptions, classes: int | None, read_labels) -> list[str]:
    """The model's class names: ``--class-names`` (as many as the model gives scores), or its class indices."""
    if options.class_names is not None:
        names = read_labels(options.class_names)
        if classes is not None and len(names) != classes:
            raise UsageError(f"--class-names {options.class_names}: {len(names)} names, the model gives {classes} scores")
        return names
    if classes is None:
        raise UsageError(f"{options.model}: its class count is dynamic: give --class-names")
    return [str(k) for k in range(classes)]


def _reading(source: str, is_framework_source, read_source, read_transform):
    """The training definition read: a framework's (``torchvision:``, ``timm:``, ``hf:``) or the
    user's transforms (``file.py:NAME``: a Compose or a preset)."""
    from harness.reference.custom import load_object  # here: loads Pillow, OpenCV, simplejpeg

    if is_framework_source(source):
        return read_source(source)
    if ":" not in source or not source.rpartition(":")[0].endswith(".py"):
        raise UsageError(f"--reference {source}: deploy takes a training definition: torchvision:WEIGHTS, timm:PATH "
                         "or timm:MODEL, hf:PATH[:pil|:torchvision], or FILE.py:NAME (a Compose or preset)")
    return read_transform(load_object(source), source)


def _roots(task) -> tuple[str, ...]:
    """The task's production DALI ensemble and its taps model: what the deployment serves and the harness reads."""
    return task.repository.ensemble("dali"), task.repository.taps("dali")


def _resize_words(p) -> str:
    r = p.resize
    how = "PIL's resampling" if r.resampling == "pil" else "DALI's resampling"
    return f"{r.mode} {list(r.size)} {r.interpolation} ({how}), crop {list(p.crop.size)}"


def _compose(out: Path, models, name: str | None) -> str:
    import re


    project = name or re.sub(r"[^a-z0-9_-]", "-", out.resolve().name.lower()).strip("-_") or "deployment"
    return compose_file(out, list(models), project)


def validate(out: Path, models) -> Validation:
    """The production profile as this repository's own is proven: every ``config.pbtxt`` through
    Triton's protobuf schema, every ``mixed`` DALI pipeline defined and serialized by the pinned DALI
    (each argument in its schema), the engine builder's trtexec command (its dry run)."""
    import subprocess
    import sys

    import nvidia.dali as dali

    from harness.preprocessing.dali_graph import missing_arguments, pipeline_arguments, production_pipelines
    from harness.repository import RepositoryError, load_repository  # here: loads protobuf, tomli_w, tritonclient

    configs = load_repository(out)
    missing = set(models) - set(configs)
    if missing:
        raise RepositoryError(f"{out}: {', '.join(sorted(missing))} not written")
    pipelines = production_pipelines(out)
    for name, pipe in pipelines.items():
        pipe.serialize()
        unknown = missing_arguments(pipeline_arguments(pipe))
        if unknown:
            raise RepositoryError(f"{out}/{name}: DALI {dali.__version__} has no {', '.join(unknown)}")
    builder = packaged("docker/build_engine.py")
    command = "(docker/build_engine.py not in this installation: build the engine with it from the harness project)"
    if builder.is_file():
        run = subprocess.run([sys.executable, str(builder), "--repository", str(out), "--out", "/engine", "--dry-run"],
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise RepositoryError(f"the engine builder refuses {out}: {run.stderr.strip()}")
        command = run.stdout.strip().replace(str(out), "/models")
    return Validation(len(configs), dali.__version__, tuple(sorted(pipelines)), command)


def self_check(out: Path, options: DeployOptions, log, progress):
    """``harness check`` of the cpu profile of ``out`` (the same DALI graph on DALI's CPU kernels,
    the ONNX in ONNX Runtime) on ``options.images`` against the same training definition."""
    from harness.check.job import CheckOptions, no_progress  # here: loads Pillow, OpenCV, simplejpeg
    from harness.check.job import run as check  # here: loads Pillow, OpenCV, simplejpeg only when called
    from harness.session import Session  # here: loads Pillow, simplejpeg only when called
    from harness.target import Target  # here: loads numpy only when called

    session = Session(repository=out, labels=options.class_names)
    check_options = CheckOptions(options.images, options.report, Target(pipeline="dali", task=options.task),
                                 reference=options.reference, reference_model=str(out / "classifier" / "model.onnx"),
                                 formats=("json", "md", "csv"), log_reading=False)  # the summary says it
    return check(session, check_options, log=log, progress=progress or no_progress)
