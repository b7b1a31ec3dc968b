"""The model repository: configs parsed with Triton's own schema, and the cpu profile.

The checked-in ``model_repository/`` is the production (gpu) profile. The cpu profile is
derived from it, not written beside it: :func:`build_cpu_profile` copies the repository
and swaps the models that need a GPU for Python-backend models doing the same work (DALI
with the CPU decoder; the ONNX in ONNX Runtime instead of its TensorRT engine), as each
registered task declares them (:attr:`harness.task_api.models.ShippedModel.cpu`).
Names, tensors, batching and ensembles are untouched, so clients cannot tell them apart.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import tomli_w
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.client import PIPELINES
from harness.engine_input import FILENAME as ENGINE_INPUT_FILENAME
from harness.engine_input import EngineInput, config_digest
from harness.errors import HarnessError
from harness.model import LABELS_FILENAME, ONNX_FILENAME
from harness.paths import no_repository
from harness.spec import SPEC_FILENAME, SPEC_PARAMETER, Spec, load_spec, to_table
from harness.task import TASKS, named_deployments, repository_models, shipped_files, shipped_models
from harness.task_api.models import CpuReplacement, ShippedModel
from harness.written import RECORD_FILENAME, replacing

PROFILES = ("gpu", "cpu")
CONFIG_FILENAME = "config.pbtxt"
TENSORRT_PLATFORM = "tensorrt_plan"

ModelConfig = model_config_pb2.ModelConfig


class RepositoryError(HarnessError, ValueError):
    """A model repository is incomplete or its configs are malformed."""


@dataclass(frozen=True)
class QueuePolicy:
    """A dynamic batcher's ``default_queue_policy``: at most ``max_queue_size`` requests wait
    (one more is refused at once: ``Exceeds maximum queue size``), none longer than
    ``timeout_us`` (then refused: ``Request timeout expired``), so that overload is refused
    fast instead of queued for seconds. A client may ask for a shorter wait."""

    max_queue_size: int
    timeout_us: int

    def apply(self, config: ModelConfig) -> None:
        policy = config.dynamic_batching.default_queue_policy
        policy.max_queue_size = self.max_queue_size
        policy.timeout_action = model_config_pb2.ModelQueuePolicy.REJECT
        policy.default_timeout_microseconds = self.timeout_us
        policy.allow_timeout_override = True


CPU_QUEUE_POLICY = QueuePolicy(max_queue_size=16, timeout_us=5_000_000)
"""Every dynamic batcher of the cpu profile (benchmarks/overload.py, docs/robustness.md): 1000
concurrent requests were answered p50 34 s without a bound (the server at 4.1 GB after);
with 16 waiting, the excess is refused in 0.2 s (p50) and those answered take 2.6 s (p50),
on the same loaded 2 cores (1.4 GB after). The harness's own clients stay below 16 (check:
8 images in flight). 5 s only catches a stalled instance: 16 requests wait that long only
at 0.6 s an image."""


def load_config(path: Path) -> ModelConfig:
    """Parse one ``config.pbtxt`` with Triton's ``ModelConfig`` protobuf schema."""
    try:
        return text_format.Parse(path.read_text(), ModelConfig())
    except text_format.ParseError as exc:
        raise RepositoryError(f"{path}: {exc}") from None


def load_repository(repo: Path) -> dict[str, ModelConfig]:
    """Every model's config in a repository, by model name (the directory name)."""
    if not repo.is_dir():
        raise RepositoryError(no_repository(repo))
    configs = {}
    for config_path in sorted(repo.glob(f"*/{CONFIG_FILENAME}")):
        config = load_config(config_path)
        if config.name and config.name != config_path.parent.name:
            raise RepositoryError(f"{config_path}: name '{config.name}' differs from its directory")
        configs[config_path.parent.name] = config
    if not configs:
        raise RepositoryError(f"{repo}: no model configs found")
    return configs


def with_called_models(repo: Path, models: Sequence[str]) -> list[str]:
    """``models`` and every model of ``repo`` they call, for a server loading only them
    (explicit model control). Triton loads an ensemble's steps with it, but not the models a
    Python (BLS) model calls: those are named in its config's parameters (OCR's
    ``detection_model``, ``recognizer``...), so a parameter whose value is a model of the
    repository counts as a call. Followed through ensemble steps and calls alike."""
    configs = load_repository(repo)
    wanted, queue = dict.fromkeys(models), list(models)
    while queue:
        config = configs.get(queue.pop())
        if config is None:  # not in the repository: the server names it when it refuses to load it
            continue
        steps = [step.model_name for step in config.ensemble_scheduling.step]
        called = [p.string_value for p in config.parameters.values() if p.string_value in configs]
        for name in steps + called:
            if name not in wanted:
                wanted[name] = None
                queue.append(name)
    return list(wanted)


CHECK_HOST = ("load them with the check host's switch: docker compose -f docker-compose.yml -f docker-compose.check.yml "
              "up -d, or kubectl apply -k deploy/kubernetes/overlays/check-host (docs/gpu.md)")
"""How a server gets the stage taps (:func:`stage_taps`), in the words every refusal uses."""


def production_models(repo: Path) -> list[str]:
    """Of the shipped models (:func:`harness.task.shipped_models`), those a production server loads:
    every task's ensemble of each pipeline and what it runs or calls (:func:`with_called_models`:
    ``ocr_dali`` decodes with ``ocr_decode_dali``). Clients call those ensembles."""
    entry = [task.repository.ensemble(p) for task in TASKS.values() if task.repository for p in PIPELINES]
    needed = set(with_called_models(repo, entry))
    return [m for m in shipped_models() if m in needed]


def stage_taps(repo: Path) -> list[str]:
    """The shipped models only a check reads (the stage taps: every stage's tensors, answered to any
    client, docs/gpu.md): loaded on a check host only, never by production's default."""
    production = set(production_models(repo))
    return [m for m in shipped_models() if m not in production]


def save_config(config: ModelConfig, path: Path, header: str = "") -> None:
    """Write ``config`` (protobuf's text form) under ``header``'s comment lines; a TensorRT
    model's engine input file is rewritten with it (the engine builder reads that, not the config)."""
    path.write_text(header + text_format.MessageToString(config))
    if config.platform == TENSORRT_PLATFORM:
        write_engine_input(path.parent)


def spec_parameter(config: ModelConfig) -> str | None:
    """The spec file a model's config names with its ``spec`` parameter (None: it names none)."""
    return config.parameters[SPEC_PARAMETER].string_value if SPEC_PARAMETER in config.parameters else None


def config_comments(path: Path) -> str:
    """The comment lines of the config at ``path``, which protobuf's text form drops: what
    :func:`save_config` is given back as its header when a config is rewritten."""
    return "".join(line + "\n" for line in path.read_text().splitlines() if line.startswith("#"))


def engine_input(model_dir: Path) -> EngineInput:
    """What the engine builder needs of ``model_dir``'s config (:mod:`harness.engine_input`), read
    with Triton's protobuf: its batch limit, its first input's name and dims, its spec file."""
    config_path = model_dir / CONFIG_FILENAME
    config = load_config(config_path)
    if config.platform != TENSORRT_PLATFORM or not config.input:
        raise RepositoryError(f"{config_path}: not a TensorRT model with an input (platform {config.platform!r})")
    spec = spec_parameter(config)
    first = config.input[0]
    return EngineInput(config.max_batch_size, first.name, tuple(first.dims), spec, config_digest(config_path))


def write_engine_input(model_dir: Path) -> Path:
    """``model_dir``'s engine input file, written from its config as it is now."""
    path = model_dir / ENGINE_INPUT_FILENAME
    path.write_text(engine_input(model_dir).to_json())
    return path


CLASS_OUTPUTS = ("logits", "probabilities", "LOGITS", "PROBABILITIES")
"""Outputs whose one dimension is the classifier's class count (classifier and ensembles)."""


def set_class_count(repo: Path, classes: int) -> list[str]:
    """Set the class dimension of every classifier-shaped output in ``repo``'s configs to
    ``classes``; returns the models changed (a config already right is left untouched)."""
    changed = []
    for config_path in sorted(repo.glob(f"*/{CONFIG_FILENAME}")):
        config = load_config(config_path)
        outputs = [o for o in config.output if o.name in CLASS_OUTPUTS and len(o.dims) == 1 and o.dims[0] != classes]
        if not outputs:
            continue
        for output in outputs:
            output.dims[:] = [classes]
        header = config_comments(config_path)
        save_config(config, config_path, header)
        changed.append(config_path.parent.name)
    return changed


def shipped_in(repo: Path) -> list[tuple[ShippedModel, ModelConfig | None]]:
    """The registered tasks' models that need more than their folder (:func:`harness.task.shipped_files`)
    which ``repo`` has, each with its config: the default task's always (the repository's base: a
    missing one is refused by its check), another task's where its folder holds a config (a
    user's repository may have no embedder, no detector)."""
    named = named_deployments(repo)
    # A repository of deployments its users named holds none of this repository's own models.
    base = set() if named else set(repository_models(None).added)
    found = []
    for model in [*shipped_files(), *(m for d in named.values() for m in d.repository.shipped)]:
        config_path = repo / model.name / CONFIG_FILENAME
        if model.name in base or config_path.is_file():
            found.append((model, load_config(config_path) if config_path.is_file() else None))
    return found


def check_models(repo: Path, specs: Mapping[str, Spec]) -> None:
    """Every model's files in ``repo`` meet its contract (:attr:`ShippedModel.check`, the task's),
    against the spec it reads (``specs``: by file name): the classifier's ONNX and labels exist,
    meet the contract and fit the spec's crop; so do the embedder's, and the detector's ONNX
    against its config, where the repository has them."""
    for model, config in shipped_in(repo):
        if model.check is not None:
            spec = (spec_parameter(config) if config else None) or SPEC_FILENAME
            model.check(repo / model.name, specs[spec], config)


def cpu_replacements(repo: Path | None = None) -> dict[str, CpuReplacement]:
    """How the cpu profile serves each model that needs a GPU in production: the registered tasks'
    (:attr:`ShippedModel.cpu`), and those of the deployments named in ``repo``, by model name."""
    named = named_deployments(repo) if repo is not None else {}
    models = [*shipped_files(), *(m for d in named.values() for m in d.repository.shipped)]
    return {model.name: model.cpu for model in models if model.cpu is not None}


def spec_names(repo: Path) -> list[str]:
    """The spec files a repository's models read: ``preprocessing.toml`` and every other one a
    model's config names with a ``spec`` parameter (the detector's ``detection.toml``)."""
    # A repository of deployments its users named has their specs only.
    names = set() if named_deployments(repo) and not (repo / SPEC_FILENAME).is_file() else {SPEC_FILENAME}
    for config in load_repository(repo).values():
        if SPEC_PARAMETER in config.parameters:
            names.add(config.parameters[SPEC_PARAMETER].string_value)
    return sorted(names)


def _overrides(specs) -> dict[str, Path]:
    """``specs`` as spec file name -> the file served in its place (a bare path replaces
    ``preprocessing.toml``, as it always has)."""
    if specs is None:
        return {}
    return {SPEC_FILENAME: Path(specs)} if isinstance(specs, (str, Path)) else {k: Path(v) for k, v in specs.items()}


def build_profile(source: Path, out: Path, profile: str = "cpu", spec_path=None) -> Path:
    """Write a profile of the repository ``source`` into ``out`` (:func:`profile_written`)."""
    with profile_written(source, out, profile, spec_path):
        pass
    return out


@contextlib.contextmanager
def profile_written(source: Path, out: Path, profile: str = "cpu", spec_path=None,
                    writer: str = "harness repo build") -> Iterator[Path]:
    """A profile of the repository ``source``, written in a new folder that the block may add to,
    then put in place of ``out`` (:func:`harness.written.replacing`: an ``out`` the harness did not
    write, inside ``source`` or this project's repository, is refused before anything is written).

    The gpu profile is a copy; the cpu profile swaps the GPU-only models (see the module
    docstring). Either way each spec goes in resolved (``extends`` followed): a copied
    ``extends`` path would no longer point anywhere. ``spec_path`` serves other specs than
    the repository's own: a path in place of ``preprocessing.toml``, or a dict of spec file
    name (``detection.toml``) -> path.
    """
    if profile not in PROFILES:
        raise RepositoryError(f"profile must be one of {PROFILES}, got {profile!r}")
    overrides = _overrides(spec_path)
    names = spec_names(source)
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise RepositoryError(f"{source}: no model reads {', '.join(unknown)} (its specs: {', '.join(names)})")
    specs = {name: load_spec(overrides.get(name, source / name)) for name in names}
    check_models(source, specs)
    with replacing(out, writer, {source: "the repository it is built from"}) as written:
        _write_profile(source, written.folder, profile, specs)
        yield written.folder


def _write_profile(source: Path, folder: Path, profile: str, specs: dict[str, Spec]) -> None:
    # Never the source's own record: the new folder gets one of what is written in it.
    if profile == "gpu":
        # A real copy: it may be mounted into a container, where a link would dangle.
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__", RECORD_FILENAME), dirs_exist_ok=True)
    else:
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.plan", "__pycache__", "*.onnx", RECORD_FILENAME),
                        dirs_exist_ok=True)
        # The ONNX models are large and read-only: link them rather than copy them (every model
        # folder holding one: the classifier, the embedder, each task's network).
        for onnx in sorted(source.glob(f"*/{ONNX_FILENAME}")):
            (folder / onnx.parent.name / ONNX_FILENAME).symlink_to(onnx.resolve())
    for name, spec in specs.items():
        (folder / name).write_text(f"# Served by the {profile} profile; resolved from {spec.source}\n"
                                   + tomli_w.dumps(to_table(spec.preprocess, spec.postprocess, spec.recognition)))
    if profile == "cpu":
        for name, replacement in cpu_replacements(source).items():
            if (folder / name).is_dir():  # a user's repository may have no embedder
                _to_python_backend(folder / name, replacement, source_name=f"{source.name}/{name}")
        # A later version's ONNX (a deployment's 2/model.onnx), linked into the version folder its model.py now holds.
        for onnx in sorted(source.glob(f"*/[0-9]*/{ONNX_FILENAME}")):
            (folder / onnx.parent.parent.name / onnx.parent.name / ONNX_FILENAME).symlink_to(onnx.resolve())
        _queue_policies(folder, CPU_QUEUE_POLICY)


def _queue_policies(repo: Path, policy: QueuePolicy) -> None:
    """``policy`` on every dynamic batcher of ``repo`` (its comments kept)."""
    for config_path in sorted(repo.glob(f"*/{CONFIG_FILENAME}")):
        config = load_config(config_path)
        if not config.HasField("dynamic_batching"):
            continue
        policy.apply(config)
        header = config_comments(config_path)
        save_config(config, config_path, header)


def models_of(repo: Path, roots) -> list[str]:
    """``roots`` and every model their ensembles run, step by step (a step that is itself an
    ensemble followed too), sorted: what serving them needs."""
    configs, found, todo = load_repository(repo), set(), list(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if name not in configs:
            raise RepositoryError(f"{repo}: no model {name!r} (models: {', '.join(configs)})")
        found.add(name)
        todo += [step.model_name for step in configs[name].ensemble_scheduling.step]
    return sorted(found)


def copy_models(source: Path, folder: Path, models, spec_table: dict, header: str = "") -> Path:
    """The production configs and code of ``models`` of ``source`` written into ``folder`` (new and
    empty: :func:`harness.written.replacing`'s), without their ONNX, engines or labels (the
    deployment brings its own), and beside them the one spec every one of them reads,
    ``spec_table`` (:func:`~harness.spec.to_table`'s shape, with ``[reference]``) under
    ``header``'s comment lines."""
    read = {name: load_config(source / name / CONFIG_FILENAME) for name in models}
    others = sorted({c.parameters[SPEC_PARAMETER].string_value for c in read.values() if SPEC_PARAMETER in c.parameters})
    if others:
        raise RepositoryError(f"{source}: the models {', '.join(models)} read other specs than {SPEC_FILENAME}: "
                              f"{', '.join(others)}")
    for name in models:
        shutil.copytree(source / name, folder / name,
                        ignore=shutil.ignore_patterns("*.onnx", "*.plan", "*.stamp.json", LABELS_FILENAME, "__pycache__"))
    (folder / SPEC_FILENAME).write_text(header + tomli_w.dumps(spec_table))
    return folder


def set_input_size(repo: Path, old: tuple[int, int], new: tuple[int, int]) -> list[str]:
    """Every config dimension of the model input's size ``old`` ([3, H, W] model inputs, [H, W, 3]
    crops) set to ``new``; returns the models changed (their comments kept)."""
    changed = []
    for config_path in sorted(repo.glob(f"*/{CONFIG_FILENAME}")):
        config = load_config(config_path)
        edited = False
        for tensor in (*config.input, *config.output):
            for before, after in (([3, *old], [3, *new]), ([*old, 3], [*new, 3])):
                if list(tensor.dims) == before and before != after:
                    tensor.dims[:] = after
                    edited = True
        if edited:
            header = config_comments(config_path)
            save_config(config, config_path, header)
            changed.append(config_path.parent.name)
    return changed


def build_cpu_profile(source: Path, out: Path, spec_path=None) -> Path:
    """The cpu profile of ``source`` in ``out``: :func:`build_profile` with ``profile="cpu"``."""
    return build_profile(source, out, "cpu", spec_path)


def _to_python_backend(model_dir: Path, replacement: CpuReplacement, source_name: str) -> None:
    config = load_config(model_dir / CONFIG_FILENAME)
    config.ClearField("platform")
    config.ClearField("default_model_filename")  # a serialized DALI pipeline's (model.dali): the Python model is model.py
    config.backend = "python"
    spec = spec_parameter(config)
    config.parameters.clear()
    if spec:  # which spec the model reads is the model's, in every profile
        config.parameters[SPEC_PARAMETER].string_value = spec
    for key, value in replacement.parameters.items():
        config.parameters[key].string_value = value
    for group in config.instance_group:
        group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
        group.count = replacement.instances
    if replacement.max_queue_delay_us is not None and config.HasField("dynamic_batching"):
        config.dynamic_batching.max_queue_delay_microseconds = replacement.max_queue_delay_us
    header = f"# cpu profile of {source_name}, generated by `harness repo build --profile cpu`.\n"
    save_config(config, model_dir / CONFIG_FILENAME, header)
    # Every version folder (a deployment's later versions too: the config's version_policy loads each) runs it.
    for version_dir in [d for d in model_dir.iterdir() if d.is_dir() and d.name.isdigit()]:
        for stale in version_dir.iterdir():
            stale.unlink()
        (version_dir / "model.py").write_text(
            f'"""{header[2:].strip()}"""\n\nfrom {replacement.entry_module} import TritonPythonModel  # noqa: F401\n'
        )
