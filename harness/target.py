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
    """This repository's ``pipeline`` for ``task`` (None: classification), its ensemble and taps
    model ready on the server, else a one-line refusal naming the models the server has (give
    ``--model`` for one of those)."""
    models = session.task_models(task)
    missing = [m for m in (models.ensemble(pipeline), models.taps(pipeline)) if not client.is_ready(m)]
    if missing:
        ready = client.ready_models()
        raise UsageError(f"no {missing[0]} on {client.url}: this is not a server of this repository's models; give "
                         "--model NAME for one of yours (models on the server: "
                         f"{', '.join(ready) if ready else 'none ready'})")
    return session.deployment(client, pipeline, task=task)


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
