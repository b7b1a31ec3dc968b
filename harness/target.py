"""Which deployed side a job reads, as the user named it: this repository's ``--pipeline``,
or ``--model`` with its ``--output`` and ``--stage`` overrides. The command-line argument
group parses into a :class:`Target`; :func:`open_deployment` turns it into the
:class:`~harness.deployment.base.Deployment` found on the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from harness.deployment.discovery import ProbeRejected
from harness.deployment.mapping import parse_overrides
from harness.errors import UsageError
from harness.task import BUILT_IN, TASKS, get_task

if TYPE_CHECKING:
    from harness.client import TritonClient
    from harness.deployment.base import Deployment
    from harness.session import Session

PROBE_IMAGES = 5
"""Images tried, in order, as the probe discovery runs through a ``--model``."""


@dataclass(frozen=True)
class Target:
    """``model`` None: this repository's ``pipeline`` (dali or opencv, with its taps model)."""

    pipeline: str = "dali"
    model: str | None = None
    output: str | None = None
    """The output of class scores (None: found)."""
    stages: Mapping[str, str] = field(default_factory=dict)
    """``{step or step.tensor: stage}`` overriding the mapping found (``--stage``)."""
    task: str | None = None
    """``--task`` (None: classification for a pipeline; for a model, the task discovery finds)."""
    client: str | None = None
    """``file.py:name``: the client's own preprocessing, whose tensors ``model`` is fed (``--client``)."""
    postprocess: str | None = None
    """``file.py:name``: the user's postprocessing of a detector's raw output, run on both sides
    (``--postprocess``; None: the spec's ``[postprocess]``)."""

    @property
    def foreign(self) -> bool:
        """A model that is not one of this repository's (its ensembles, their twins answering the
        stage taps, the models they end in): its training side is the user's."""
        from harness.client import PIPELINES  # here: loads Pillow, simplejpeg only when called

        own = {name for task in BUILT_IN for models in [TASKS[task].repository]
               for name in (models.model, *map(models.ensemble, PIPELINES), *map(models.answer, PIPELINES))}
        return self.model is not None and self.model not in own

    def served_models(self) -> tuple[str, ...] | None:
        """What a server started for this target loads: the task's models of this repository's
        ``pipeline`` (:meth:`harness.client.TaskModels.served`), or, for a ``model`` (any the
        user names), every model of the repository (None)."""
        own = get_task(self.task).repository if self.model is None else None
        return own.served((self.pipeline,)) if own is not None else None

    def note(self) -> tuple[str, ...]:
        """What the report should add about this choice."""
        if self.model is None or self.foreign:
            return ()
        return (f"{self.model} is this repository's own ensemble: --pipeline reads every preprocessing stage from its "
                "taps model, a richer view than its steps give",)


def served_models(targets: Sequence["Target"]) -> tuple[str, ...] | None:
    """What a server started for a job reading ``targets`` loads: every target's models
    (:meth:`Target.served_models`), or every model of the repository (None) when one of them
    is a ``--model``."""
    names: list[str] = []
    for target in targets:
        models = target.served_models()
        if models is None:
            return None
        names += models
    return tuple(dict.fromkeys(names))


def require_reference_model(targets: Sequence[Target], reference_model: str) -> None:
    """A foreign deployment needs the user's trained model: refuse the repository's stand-ins."""
    from harness.reference.model import CHOICES  # here: loads Pillow, OpenCV, simplejpeg only when called

    foreign = [t.model for t in targets if t.foreign]
    if foreign and reference_model in CHOICES:
        raise UsageError(f"--model {foreign[0]} is not this repository's ensemble: give the model it was trained as "
                         "with --reference-model PATH (an ONNX or TorchScript file), so the harness can compare "
                         "what training predicts")


OWN_ANSWER_ERROR = 0.05
"""A served network is this repository's when its output on a photo's model input differs from
the repository's model's by at most this, relative (the root mean square of the difference over
that of the repository's output): the cpu profile's ONNX Runtime answers it exactly (0), an fp16
engine within about 1%; another network bearing the name answers otherwise (figures in
docs/own-deployments.md)."""


def require_own_model(session: "Session", client: "TritonClient", target: Target, reference_model: str, model,
                      reference: Callable[[bytes], dict] | None, images: Sequence[Path], task: str) -> None:
    """A ``--model`` bearing one of this repository's names and compared against this
    repository's model (``reference_model`` a built-in choice) must be this repository's as the
    server serves it, or the check judges the user's model against ours: every model it runs
    (itself, each step of an ensemble) has the configuration of ``session.repository`` as the
    server reports it (platform or backend, or the cpu profile's where that replaces it; inputs
    and outputs with data types and dims; batch size; an ensemble's steps), and ``task``'s
    network, where it runs, answers the model input of the first of ``images`` ``reference``
    reads as ``model`` does (:data:`OWN_ANSWER_ERROR`). Else a one-line
    :class:`UsageError` naming what differs, ``--reference-model`` and ``--repository``."""
    from harness.reference.model import CHOICES  # here: loads Pillow, OpenCV, simplejpeg only when called

    if target.model is None or target.foreign or reference_model not in CHOICES:
        return
    reason = _not_own(session, client, target.model, model, reference, images, task)
    if reason:
        raise UsageError(f"--model {target.model} is not provably this repository's model ({reason}): give the model "
                         "it was trained as with --reference-model PATH, or the repository it was deployed from with "
                         "--repository DIR")


def _not_own(session: "Session", client: "TritonClient", name: str, model, reference, images, task: str) -> str:
    """Why the served ``name`` is not this repository's (:func:`require_own_model`); "" when it is."""
    # here: protobuf, Triton's config schema and the repository's configs only when a --model is proven
    from google.protobuf.json_format import ParseDict
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from harness.repository import cpu_replacements, load_repository, models_of

    own, replaced = load_repository(session.repository), cpu_replacements()
    runs = models_of(session.repository, [name])
    for step in runs:
        found = client.model_config(step)
        if not found:
            return f"the server reports no configuration of {step}"
        served, mine = ParseDict(found, ModelConfig(), ignore_unknown_fields=True), own[step]
        kinds = {mine.platform or mine.backend, *(("python",) if step in replaced else ())}
        if (served.platform or served.backend) not in kinds:
            return f"{step} runs on {served.platform or served.backend}, this repository's on {' or '.join(sorted(kinds))}"
        for what, theirs, ours in (("inputs", served.input, mine.input), ("outputs", served.output, mine.output)):
            if _tensors(theirs) != _tensors(ours):
                return f"{step}'s {what} are {_tensors(theirs)}, this repository's {_tensors(ours)}"
        if served.max_batch_size != mine.max_batch_size:
            return f"{step} batches {served.max_batch_size}, this repository's {mine.max_batch_size}"
        steps = [s.model_name for s in served.ensemble_scheduling.step]
        if steps != [s.model_name for s in mine.ensemble_scheduling.step]:
            return f"{step} runs {', '.join(steps) or 'no steps'}, this repository's runs " \
                   f"{', '.join(s.model_name for s in mine.ensemble_scheduling.step) or 'none'}"
    network = get_task(task).repository
    if network is None or network.model not in runs:
        return ""  # no network of this repository runs in it: the configurations are the whole model
    return _known_answer(client, network, model, reference, images)


def _known_answer(client: "TritonClient", network, model, reference, images) -> str:
    """Why the served ``network`` does not answer a photo's model input as ``model``; "" when it does."""
    import numpy as np  # here: this module loads no numpy until a --model is proven

    from harness.client import InferenceError  # here: loads Pillow, simplejpeg only when called
    from harness.stage import Stage

    for path in images[:PROBE_IMAGES]:
        try:
            model_input = np.asarray(reference(path.read_bytes())[Stage.INPUT], np.float32)[None]
        except Exception:  # noqa: BLE001 - an image the reference cannot read is no evidence: the next one is tried
            continue
        expected = np.asarray(model.logits(model_input), np.float64).ravel()
        try:
            answer = client.infer(network.model, {network.model_input: model_input}, [network.model_output])
        except InferenceError as exc:
            return f"{network.model} refuses {path.name}'s model input: {str(exc).splitlines()[0]}"
        served = np.asarray(answer[network.model_output], np.float64).ravel()
        if served.shape != expected.shape:
            return f"{network.model} answers {served.size} values, this repository's model {expected.size}"
        error = float(np.sqrt(np.mean((served - expected) ** 2)) / max(np.sqrt(np.mean(expected ** 2)), 1e-12))
        if not error <= OWN_ANSWER_ERROR:
            return (f"{network.model} answers {path.name} unlike this repository's model: its {network.model_output} "
                    f"differ from ours by {error:.0%} (root mean square, relative), at most {OWN_ANSWER_ERROR:.0%} "
                    "for the same network")
        return ""
    return f"none of the first {PROBE_IMAGES} images gave a model input to compare {network.model}'s answer on"


def _tensors(tensors) -> str:
    """Tensors as a config declares them: ``input FP32 [3, 224, 224]``, comma-separated."""
    from tritonclient.grpc.model_config_pb2 import DataType  # here: Triton's config schema only when called

    return ", ".join(f"{t.name} {DataType.Name(t.data_type).removeprefix('TYPE_')} {list(t.dims)}" for t in tensors)


def open_deployment(session: "Session", client: "TritonClient", target: Target, images: Sequence[Path],
                    log: Callable[[str], None] = lambda line: None,
                    reference: Callable[[bytes], dict] | None = None, model=None) -> "Deployment":
    """The deployment ``target`` names on ``client``'s server; a ``--model`` is probed with the
    first of ``images`` it accepts (at most :data:`PROBE_IMAGES`), its tensors read against
    ``reference`` (the job's reference recipe) on that image, and against what ``model`` (the
    reference model) answers on it; where that image leaves a tensor
    unsettled (a flat photo says nothing of a scale) the next ones are tried, and the first
    that settles every tensor is kept. What was found is logged line by line. The spec's
    ``[deployment.stages]`` apply under ``target.stages``."""
    if target.model is None:
        if target.client:
            raise UsageError(f"--client {target.client} needs --model: the model on the server the client's tensors "
                             "are sent to")
        return _repository_pipeline(session, client, target.pipeline, target.task)

    try:
        from_spec = parse_overrides([f"{step}={stage}" for step, stage in session.spec.deployed_stages.items()])
    except ValueError as exc:
        raise UsageError(f"[deployment.stages] of {session.spec_path}: {exc}".replace("--stage ", "")) from None
    stages = {**from_spec, **target.stages}
    sources = {key: "--stage" if key in target.stages else f"[deployment.stages] of {session.spec_path}" for key in stages}
    problems, found = [], None
    for path in images[:PROBE_IMAGES]:
        try:
            probe = path.read_bytes()
        except OSError as exc:
            problems.append(f"{path.name}: {exc.strerror or exc}")
            continue
        try:
            deployment = session.deployment(client, model=target.model, probe=probe, output=target.output,
                                            stages=stages, reference=_reference_stages(reference, model, probe),
                                            sources=sources, client_function=target.client, task=target.task)
        except ProbeRejected as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        found = found or deployment
        if not deployment.unsettled():
            found = deployment
            break
    if found is None:
        raise UsageError(f"--model {target.model}: none of the first {len(problems)} images could probe it "
                         f"({'; '.join(problems)})")
    for line in found.describe():
        log(line)
    return found


def _repository_pipeline(session: "Session", client: "TritonClient", pipeline: str,
                         task: str | None = None) -> "Deployment":
    """This repository's ``pipeline`` for ``task`` (None: classification), once
    :func:`require_pipeline` found it served."""
    require_pipeline(session, client, pipeline, task)
    return session.deployment(client, pipeline, task=task)


def require_pipeline(session: "Session", client: "TritonClient", pipeline: str, task: str | None = None) -> None:
    """This repository's ``pipeline`` for ``task``: its ensemble and the models answering its stage
    taps ready on the server, else a one-line refusal: without the ensemble, naming the models the
    server has (give ``--model`` for one of those); with the ensemble but not its taps (a production
    server: docs/gpu.md), naming the check host's switch."""
    models = session.task_models(task)
    if not client.is_ready(models.ensemble(pipeline)):
        ready = client.ready_models()
        raise UsageError(f"no {models.ensemble(pipeline)} on {client.url}: this is not a server of this repository's "
                         "models; give --model NAME for one of yours (models on the server: "
                         f"{', '.join(ready) if ready else 'none ready'})")
    taps = [m for m in models.served((pipeline,)) if not client.is_ready(m)]
    if taps:
        from harness.repository import CHECK_HOST  # here: protobuf and Triton's config schema only for this refusal

        raise UsageError(f"no {', '.join(taps)} on {client.url}: it serves {models.ensemble(pipeline)} without the stage "
                         f"taps a check reads (a production server loads none); {CHECK_HOST}")


def _reference_stages(reference: Callable[[bytes], dict] | None, model, probe: bytes) -> dict | None:
    """The reference's stages of the probe, with ``output`` (``model``'s logits) when a model is
    given; None when there is no reference, or it cannot process the probe."""
    if reference is None:
        return None
    try:
        stages = dict(reference(probe))
        if model is not None:
            from harness.stage import Stage

            stages[Stage.OUTPUT] = model.logits(stages[Stage.INPUT][None])[0]
        return stages
    except Exception:  # noqa: BLE001 - evidence only: without it, the mapping says what it could not read
        return None
