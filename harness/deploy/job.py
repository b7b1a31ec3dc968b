"""``harness deploy`` as a job: the user's model and training definition -> a Triton model
repository of this project's own shape (validate step, DALI preprocessing with GPU decode, the
TensorRT model, the ensemble with dynamic batching, and the taps model the harness reads), proven
as far as a CPU can, then checked on photos against the same training definition.

What it writes is this repository's classification models (:func:`harness.repository.copy_models`
of the task's production ensemble and its taps model), with the user's ONNX conformed to their
contract (:func:`harness.model.conform_onnx`), the training definition read as the spec every one
of them reads, the class count and the input size set in the configs, and a compose file and a
Kubernetes manifest building the engine and serving it (:mod:`harness.deploy.compose`,
:mod:`harness.deploy.kubernetes`) from images built from the folder alone
(:mod:`harness.deploy.standalone`), with its proof (:mod:`harness.deploy.readme`). So every command
reads it as it reads this repository (``--repository DIR``), and ``harness serve --repository DIR``
serves its cpu profile: the same DALI graph on DALI's CPU kernels, the ONNX in ONNX Runtime.
``--name`` names its models after the user (:meth:`harness.client.TaskModels.renamed`), and several
such deployments share one folder; the same name again, with the same preprocessing, adds its model's
next version beside the others (:func:`harness.engine_input.version_file`).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from harness.deploy.compose import compose_file
from harness.deploy.kubernetes import KUBERNETES_FILE, kubernetes_manifest
from harness.deploy.readme import README, UNNAMED, keep_proof, readme, set_aside_proof
from harness.deploy.standalone import BUILDER_FILE, MANIFEST_FILE, write_images
from harness.engine_input import version_file
from harness.errors import EXIT_OK, UsageError
from harness.manifest import load_manifest
from harness.names import path_text
from harness.paths import TEMPLATE_REPOSITORY
from harness.spec import SPEC_FILENAME, SPEC_PARAMETER, load_spec, to_table
from harness.task import NamedDeployment, get_task, named_deployments
from harness.written import RECORD_FILENAME, replaceable, replacing

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
    triton_release: str | None = None
    """The Triton release it is written for (None: ``deploy/versions.toml``'s; another is refused unless the
    manifest knows it)."""
    name: str | None = None
    """The deployment's name: its models' (:meth:`harness.client.TaskModels.renamed`) and the compose
    project's; None: this repository's own names (``classify_dali``, ...), the compose project the folder's."""


@dataclass(frozen=True)
class Validation:
    """The production profile proven as this repository's own is, without a GPU."""

    configs: int
    """Model configs parsed by Triton's protobuf schema."""
    dali: str
    """The DALI version whose schema every argument of the ``mixed`` pipelines is in."""
    pipelines: tuple[str, ...]
    engine_commands: tuple[str, ...]
    """The engine builder's trtexec command of each version of the model, oldest first (its dry run)."""
    serialized: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    """Each DALI model's pipeline as the proof serialized it (:func:`ship_serialized` writes these bytes)."""


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
        ONNX_FILENAME,
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

    started = time.perf_counter()
    if options.task not in TASKS:
        raise UsageError(f"--task {options.task}: deploy writes {', '.join(TASKS)} deployments (this repository's "
                         f"classify_dali and its taps model); the {options.task} repositories have steps it does not "
                         "write yet")
    if not options.model.is_file():
        raise UsageError(f"{options.model}: no such model file (deploy takes an ONNX classifier)")
    if options.model.suffix.lower() != ".onnx":
        raise UsageError(f"{options.model}: deploy builds a TensorRT engine from an ONNX file: export the model to ONNX")
    if options.name is not None and not NAME.fullmatch(options.name):
        raise UsageError(f"--name {options.name!r}: a deployment's name is lowercase letters, digits, '_' and '-', "
                         "starting with a letter or digit (its models' names and the compose project's)")
    manifest = load_manifest()
    if options.triton_release not in (None, manifest.release):
        raise UsageError(f"--triton-release {options.triton_release}: deploy/versions.toml knows Triton {manifest.release} "
                         f"only (DALI {manifest.dali.version}, TensorRT {manifest.tensorrt.version}); a deployment for "
                         "another release needs that release's DALI and TensorRT versions in the manifest, read from "
                         "its own release branches (docs/deploy.md)")
    # Refused before the rest is read (and again before it is replaced): nothing of the user's is lost.
    proven = replaceable(options.out)
    reading = _reading(options.reference, is_framework_source, read_source, read_transform)
    read = reading.require()  # what no spec operation holds: refused by name, never approximated
    preprocess = read.preprocess
    size = tuple(preprocess.crop.size)
    # Everything read and checked before anything is written; the ONNX loaded by ONNX Runtime and held to
    # the production TensorRT's parser.
    try:
        loaded = load_for_tensorrt(options.model)
        taken = read_classifier(options.model, loaded.model)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    if taken.size is not None and tuple(taken.size) != size:
        raise UsageError(f"{options.model} takes {taken.size[0]}x{taken.size[1]} images; {options.reference} makes "
                         f"{size[0]}x{size[1]}: is it the model this preprocessing trained?")
    models = tuple(models_of(TEMPLATE_REPOSITORY, _roots(get_task(options.task))))
    own = get_task(options.task).repository
    deployed = models if options.name is None else tuple(sorted(own.renamed(options.name, m) for m in models))
    table = {**to_table(preprocess), "reference": {"recipe": read.recipe}}
    earlier = None  # the deployment of this name already in --out, which this one adds a version to
    if options.name is not None and proven.entries is not None:
        earlier = _refuse_clash(options, proven.out, deployed, table)
    elif proven.entries is not None and named_deployments(proven.out):
        raise UsageError(f"{path_text(options.out)} holds the deployments {', '.join(named_deployments(proven.out))} "
                         "(harness deploy --name), which a deployment without --name would replace with the folder: "
                         "give --name to add it beside them, or another --out")
    if earlier is None:
        names = _class_names(options, taken.classes, read_labels)
    else:
        names = _same_classes(options, proven.out / earlier.repository.model / LABELS_FILENAME, taken.classes, read_labels)
    source_size = tuple(load_spec(TEMPLATE_REPOSITORY / SPEC_FILENAME).preprocess.crop.size)
    header = (f"{WRITTEN_BY} from {options.reference}: {reading.framework}.\n"
              f"# Every model here reads it: the DALI pipeline (GPU decode, {_resize_words(preprocess)}),\n"
              f"# and `harness check --repository` replays it with the {read.recipe} recipe (see harness/spec.py).\n")
    # Written beside --out and put in its place only when whole and validated: a failure leaves the old one as it was.
    with replacing(options.out, "harness deploy") as written:
        if earlier is not None:
            _keep_deployments(written.out, written.folder)
            set_aside_proof(written.folder, options.name, max(earlier.versions))  # it checked the version before
            folder, classifier = written.folder, written.folder / earlier.repository.model
            model_input, versions = _add_version(classifier, earlier, options, size, loaded.model, names), \
                named_deployments(folder)[options.name].versions
            engine = classifier.name
        else:
            # A named deployment is written under this repository's names first, then renamed into the folder beside
            # the deployments already there (kept as they were: the folder is replaced only when whole).
            folder = written.folder if options.name is None else written.folder.parent / "unnamed"
            folder.mkdir(exist_ok=True)
            copy_models(TEMPLATE_REPOSITORY, folder, models, table, header)
            classifier = folder / own.model
            try:
                model_input = conform_onnx(options.model, classifier / ONNX_FILENAME, size, loaded.model)
            except ModelError as exc:
                raise UsageError(str(exc)) from None
            write_labels(classifier / LABELS_FILENAME, names)
            check_onnx(classifier / ONNX_FILENAME, size, labels=names)
            set_class_count(folder, len(names))
            set_input_size(folder, source_size, size)
            engine, versions = own.model, (1,)
            if options.name is not None:
                if proven.entries is not None:
                    _keep_deployments(written.out, written.folder)
                _name_models(folder, written.folder, models, own, options.name)
                NamedDeployment(options.name, options.task, deployed, manifest.release, options.reference).write(
                    written.folder)
                engine = own.renamed(options.name, own.model)
                folder, classifier = written.folder, written.folder / engine
        _write_manifests(written.out, folder, options.name, manifest)
        write_images(folder, manifest)
        _write_readme(folder, options, manifest)
        validated = time.perf_counter()
        validation = validate(folder, deployed, engine, versions)
        if earlier is None:  # a new version's DALI steps are the deployment's, shipped with its first
            ship_serialized(folder, deployed, validation.serialized)
        assert load_config(classifier / "config.pbtxt").platform == "tensorrt_plan"
    out = options.out
    seconds = {"write": round(validated - started, 2), "validate": round(time.perf_counter() - validated, 2)}
    result = DeployResult(options, reading, deployed, validation, len(names), options.class_names is not None, model_input,
                          seconds=seconds, onnx=loaded)
    if options.images is None:
        return result
    checked = time.perf_counter()
    check = self_check(out, options, log, progress)
    # Its proof into the folder: built beside it again and swapped in whole, as the deployment was.
    with replacing(options.out, "harness deploy") as written:
        _keep_deployments(written.out, written.folder)
        keep_proof(written.folder, options.name, Path(check.paths.get("json", options.report / "report.json")).parent)
        for kept in ("docker-compose.yml", KUBERNETES_FILE):
            (written.folder / kept).write_text((written.out / kept).read_text())
        _write_readme(written.folder, options, manifest)
    seconds["check"] = round(time.perf_counter() - checked, 2)
    seconds["total"] = round(time.perf_counter() - started, 2)
    return DeployResult(options, reading, deployed, validation, len(names), options.class_names is not None, model_input,
                        check, check.report.reference.reading, seconds, loaded)


def _write_readme(folder: Path, options: DeployOptions, manifest) -> None:
    """The folder's README: each deployment in it, the versions, its proof, the commands that check it again."""
    own = get_task(options.task).repository
    if options.name is None:
        deployments = {UNNAMED: (own.ensemble("dali"), own.model, options.reference, (1,))}
    else:
        deployments = {name: (d.repository.ensemble("dali"), d.repository.model, d.reference, d.versions)
                       for name, d in named_deployments(folder).items()}
    (folder / README).write_text(readme(folder, deployments, manifest))


NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""A deployment's name (``--name``): a Triton model's and a compose project's name alike."""


def _refuse_clash(options: DeployOptions, out: Path, deployed, table: dict) -> NamedDeployment | None:
    """A named deployment goes beside the deployments of ``out``, never over a model there: one line naming the clash.
    The name of a deployment there already takes a new version of its model, when the preprocessing is the same
    (``table``, the spec to write, equal to its spec's): returns that deployment (None: a new one)."""
    earlier = named_deployments(out).get(options.name)
    if earlier is not None:
        import tomli_w

        spec = out / earlier.repository.spec
        with spec.open("rb") as file:
            written = tomllib.load(file)
        given = tomllib.loads(tomli_w.dumps(table))  # as it would be read back
        if written != given:
            raise UsageError(f"--name {options.name}: {options.reference} preprocesses otherwise than {spec.name} "
                             f"({_first_difference(written, given)}), and a new version of {earlier.repository.model} "
                             f"cannot change what the ensemble's preprocessing step does: deploy it under another --name")
        return earlier
    clash = sorted(m for m in deployed if (out / m).exists())
    if clash:
        raise UsageError(f"--name {options.name}: {path_text(out)} holds a model {clash[0]} already, which this "
                         f"deployment would write over: give another --name")
    return None


def _first_difference(written: dict, given: dict, where: str = "") -> str:
    """The first key whose value differs between two spec tables, with both values (``resize.size [232], given [224]``)."""
    for key in sorted(written.keys() | given.keys()):
        a, b = written.get(key), given.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and a != b:
            return _first_difference(a, b, f"{where}{key}.")
        if a != b:
            return f"{where}{key} {'none' if a is None else a}, given {'none' if b is None else b}"
    return "the same"


def _same_classes(options: DeployOptions, labels: Path, classes: int | None, read_labels) -> list[str]:
    """A new version's class names: its deployment's (``labels``: one config and its labels serve every version),
    which ``--class-names``, if given, and the model's class count must match."""
    names = read_labels(labels)
    if options.class_names is not None and read_labels(options.class_names) != names:
        raise UsageError(f"--class-names {options.class_names}: not the classes of {labels.parent.name} "
                         f"({labels.parent.name}/{labels.name}), which its every version answers (one config): deploy "
                         "it under another --name")
    if classes not in (None, len(names)):
        raise UsageError(f"{options.model} gives {classes} scores, {labels.parent.name} answers {len(names)} classes in "
                         "its every version (one config): deploy it under another --name")
    return names


def _add_version(model_dir: Path, earlier: NamedDeployment, options: DeployOptions, size, model, names):
    """``options.model`` written as the next version of ``model_dir`` (``2/model.onnx`` beside version 1's, never over a
    version there), its config serving every version (``version_policy: all``; the ensemble calls the latest) and its
    deployment's record listing the versions. Returns the model input conformed (:class:`harness.model.ModelInput`)."""
    from harness.model import ONNX_FILENAME, ModelError, check_onnx, conform_onnx
    from harness.repository import config_comments, load_config, save_config

    version = max(earlier.versions) + 1
    onnx = version_file(model_dir, version, ONNX_FILENAME)
    if onnx.parent.exists():  # the record lists every version deploy wrote; the folder was proven unchanged
        raise UsageError(f"{model_dir.name}/{version}: a version folder the record of {earlier.name} does not list: "
                         "deploy does not write over it")
    onnx.parent.mkdir()
    try:
        model_input = conform_onnx(options.model, onnx, size, model)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    check_onnx(onnx, size, labels=names)
    config_path = model_dir / "config.pbtxt"
    config = load_config(config_path)
    if not config.version_policy.HasField("all"):
        config.version_policy.all.SetInParent()
        header = config_comments(config_path)
        save_config(config, config_path, header + "# Every version folder is served (version_policy all); the ensemble "
                                                  "calls the latest.\n")  # its engine input file with it
    dataclasses.replace(earlier, versions=(*earlier.versions, version)).write(model_dir.parent)
    return model_input


def _keep_deployments(out: Path, folder: Path) -> None:
    """Everything of ``out`` (a folder deploy wrote, proven unchanged) into the new ``folder``, but its
    record, its compose file and its README (written anew, for every deployment the folder holds)."""
    for entry in out.iterdir():
        if entry.name in (RECORD_FILENAME, "docker-compose.yml", KUBERNETES_FILE, README):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, folder / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, folder / entry.name, follow_symlinks=False)


def _name_models(unnamed: Path, folder: Path, models, own, name: str) -> None:
    """The models written under this repository's names in ``unnamed`` moved into ``folder`` under the
    deployment's (:meth:`harness.client.TaskModels.renamed`), every one reading the spec ``name.toml``."""
    from harness.repository import config_comments, load_config, save_config

    spec = own.named(name, models).spec
    for model in models:
        target = folder / own.renamed(name, model)
        shutil.move(unnamed / model, target)
        config_path = target / "config.pbtxt"
        config = load_config(config_path)
        said = f"# {target.name}: {model} of the deployment {name} (harness deploy --name), reading {spec}.\n"
        header = config_comments(config_path)
        config.name = target.name
        for step in config.ensemble_scheduling.step:
            step.model_name = own.renamed(name, step.model_name)
        if config.platform != "ensemble":
            config.parameters[SPEC_PARAMETER].string_value = spec
        save_config(config, config_path, said + header)  # a TensorRT model's engine input file with it
    shutil.move(unnamed / SPEC_FILENAME, folder / spec)


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


def _write_manifests(out: Path, folder: Path, name: str | None, manifest) -> None:
    """The compose file and the Kubernetes manifest serving every model of ``folder`` (one deployment, or
    several named ones), building the engine of each TensorRT model there."""
    from harness.repository import load_repository

    configs = load_repository(folder)
    engines = sorted(m for m, c in configs.items() if c.platform == "tensorrt_plan")
    # The project (compose's, the Kubernetes objects' prefix): the deployment's name, the folder's once it holds several.
    named = named_deployments(folder)
    versions = {d.repository.model: d.versions for d in named.values()}  # each version's engine is built
    several = len(named) > 1
    project = (name if not several else None) or re.sub(r"[^a-z0-9_-]", "-", out.resolve().name.lower()).strip("-_") \
        or "deployment"
    (folder / "docker-compose.yml").write_text(compose_file(sorted(configs), project, engines, versions))
    (folder / KUBERNETES_FILE).write_text(kubernetes_manifest(project, sorted(configs), engines, manifest.release,
                                                              versions))


def validate(out: Path, models, engine: str = "classifier", versions: tuple[int, ...] = (1,)) -> Validation:
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
    serialized = {}
    for name, pipe in pipelines.items():
        serialized[name] = pipe.serialize()
        unknown = missing_arguments(pipeline_arguments(pipe))
        if unknown:
            raise RepositoryError(f"{out}/{name}: DALI {dali.__version__} has no {', '.join(unknown)}")
    # The folder's own engine builder and manifest, as its engine.Dockerfile runs them: each version's engine.
    commands = []
    for version in versions:
        run = subprocess.run([sys.executable, str(out / BUILDER_FILE), "--manifest", str(out / MANIFEST_FILE),
                              "--repository", str(out), "--model", engine, "--version", str(version), "--out",
                              f"/models/{engine}/{version}", "--dry-run"], capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise RepositoryError(f"the engine builder refuses {out}: {run.stderr.strip()}")
        commands.append(run.stdout.strip().replace(str(out), "/models"))
    return Validation(len(configs), dali.__version__, tuple(sorted(pipelines)), tuple(commands), serialized)


SERIALIZED = "model.dali"
"""The DALI pipeline as the manifest's DALI serialized it, beside its ``dali.py`` (docs/deploy.md: why)."""


def ship_serialized(folder: Path, models, serialized: Mapping[str, bytes]) -> list[str]:
    """Each DALI model of ``models`` in ``folder`` gets its pipeline serialized by this DALI (the manifest's,
    ``device_id=None``: no GPU needed; ``serialized``, :attr:`Validation.serialized`, the very bytes proven) as
    ``1/model.dali``, named by its config's ``default_model_filename``: the DALI backend loads it before it would
    autoserialize ``dali.py`` (the fallback), so the DALI step needs nothing of the harness at load. Returns the
    models given one."""
    from harness.repository import config_comments, load_config, save_config

    shipped = []
    for name, pipeline in serialized.items():
        if name not in models:
            continue
        (folder / name / "1" / SERIALIZED).write_bytes(pipeline)
        config_path = folder / name / "config.pbtxt"
        config = load_config(config_path)
        config.default_model_filename = SERIALIZED
        save_config(config, config_path, config_comments(config_path))
        shipped.append(name)
    return shipped


def self_check(out: Path, options: DeployOptions, log, progress):
    """``harness check`` of the cpu profile of ``out`` (the same DALI graph on DALI's CPU kernels,
    the ONNX in ONNX Runtime) on ``options.images`` against the same training definition."""
    from harness.check.job import CheckOptions, no_progress  # here: loads Pillow, OpenCV, simplejpeg
    from harness.check.job import run as check  # here: loads Pillow, OpenCV, simplejpeg only when called
    from harness.session import Session  # here: loads Pillow, simplejpeg only when called
    from harness.target import Target  # here: loads numpy only when called

    session = Session(repository=out, labels=options.class_names, deployment_name=options.name)
    check_options = CheckOptions(options.images, options.report, Target(pipeline="dali", task=options.task),
                                 reference=options.reference, reference_model=str(session.model_path(options.task)),
                                 formats=("json", "md", "csv"), log_reading=False)  # the summary says it
    return check(session, check_options, log=log, progress=progress or no_progress)
