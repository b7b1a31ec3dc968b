"""Any Triton deployment, read from what it exposes.

An ensemble is replayed step by step: each step model is called directly with the tensors
the previous steps produced, so every intermediate tensor comes from the deployed models
themselves (the harness never re-implements them), and each step output is matched to a
stage (:mod:`harness.deployment.mapping`). The production answer is the ensemble's own; an
image whose replay does not reproduce it keeps only that answer (the ensemble does
something its steps alone do not, so their tensors are not trusted), and the run says how
many. A single model exposes its scores only.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from harness.client import TritonClient
from harness.deployment.base import Deployment, ImageRequest
from harness.deployment.discovery import (
    DeploymentError,
    ModelInfo,
    ProbeRejected,
    Step,
    TensorInfo,
    image_input,
    numpy_dtype,
    read_model,
    task_output,
)
from harness.deployment.mapping import TensorMapping, map_tensor, overridden
from harness.scores import ScoreKind
from harness.stage import STAGES, Stage

REPLAY_RTOL = REPLAY_ATOL = 1e-4
"""How close the replay's scores must come to the ensemble's to trust the step tensors
(the same models on the same tensors: only a nondeterministic step differs)."""


def decoded_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) of an encoded image from its header, None if PIL cannot read it."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size[::-1]
    except Exception:  # noqa: BLE001 - only a hint for the mapping
        return None


@dataclass
class ReplayStats:
    """How often the step-by-step replay reproduced the ensemble's scores."""

    images: int = 0
    mismatched: list[str] = field(default_factory=list)
    max_abs_diff: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, image: str, diff: float, trusted: bool) -> None:
        with self._lock:
            self.images += 1
            self.max_abs_diff = max(self.max_abs_diff, diff)
            if not trusted:
                self.mismatched.append(image)

    def to_dict(self) -> dict:
        return {"images": self.images, "mismatched": len(self.mismatched), "mismatched_images": self.mismatched[:20],
                "max_abs_diff": self.max_abs_diff, "trusted": not self.mismatched}

    def describe(self) -> str:
        if not self.images:
            return "step-by-step replay: no image replayed"
        if not self.mismatched:
            return (f"step-by-step replay reproduced the ensemble's scores on all {self.images} images "
                    f"(max |diff| {self.max_abs_diff:.3g}): the step stages are the deployment's")
        return (f"step-by-step replay did NOT reproduce the ensemble's scores on {len(self.mismatched)} of "
                f"{self.images} images (max |diff| {self.max_abs_diff:.3g}): the ensemble does something its steps "
                "alone do not; those images' step stages are not trusted and only their output is compared")


class ModelDeployment(Deployment):
    """A single model (not an ensemble) taking the file: only its scores can be compared."""

    stages = (Stage.OUTPUT,)

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo, kind: ScoreKind, task=None):
        self.info, self.model, self.label, self.request = info, info.name, info.name, request
        self.scores_output, self.scores_kind, self._task = scores.name, kind, task

    def read(self, client: TritonClient, data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        return {Stage.OUTPUT: self.scores(client, [data])[0]}

    def describe(self) -> list[str]:
        words = "scores" if self.task.name == "classification" else "output"
        return [*super().describe(), f"{self.model} is a single {self.info.platform} model: its internal stages "
                                     f"are hidden; only the {words} {'are' if words == 'scores' else 'is'} compared"]


@dataclass(frozen=True)
class Isolation:
    """How one stage runs alone: the step producing it, fed the reference's ``source`` stage."""

    step: ModelInfo
    input_name: str
    source: TensorMapping
    output_name: str
    target: TensorMapping


class StepwiseDeployment(Deployment):
    """An ensemble replayed step by step (see the module)."""

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo, kind: ScoreKind,
                 steps: list[tuple[Step, ModelInfo]], mappings: list[TensorMapping], isolations: dict[Stage, Isolation],
                 task=None):
        self.info, self.model, self.label, self.request = info, info.name, info.name, request
        self.scores_output, self.scores_kind, self._task = scores.name, kind, task
        self.steps, self.mappings, self.isolations = steps, mappings, isolations
        self._compared = {(m.step, m.tensor): m for m in mappings if m.stage is not None and m.compared}
        self.stages = tuple(s for s in STAGES if s is Stage.OUTPUT or any(m.stage is s for m in self._compared.values()))
        self.isolates = {stage: iso.source.stage for stage, iso in isolations.items()}
        self.replay = ReplayStats()

    def describe(self) -> list[str]:
        lines = [*super().describe(), f"ensemble steps: {' -> '.join(step.model for step, _ in self.steps)}"]
        lines += [f"  {m.describe()}" for m in self.mappings]
        if self.isolates:
            lines.append("run alone on the reference: " + ", ".join(
                f"{stage} ({iso.step.name} fed the reference's {iso.source.stage}"
                + (f" as {iso.source.step}.{iso.source.tensor} holds it" if iso.source.stage is stage else "") + ")"
                for stage, iso in self.isolations.items()))
        return lines

    def to_dict(self) -> dict:
        return {**super().to_dict(), "steps": [{"model": step.model, "platform": info.platform,
                                                "inputs": step.inputs, "outputs": step.outputs}
                                               for step, info in self.steps],
                "mapping": [{"step": m.step, "tensor": m.tensor, "stage": m.stage and m.compared and str(m.stage) or None,
                             "layout": m.layout, "scale": m.scale, "why": m.why, "suggestion": m.suggestion}
                            for m in self.mappings],
                "replay": self.replay.to_dict()}

    # -- reading -------------------------------------------------------------------------
    def replay_steps(self, client: TritonClient, data: bytes) -> dict[str, np.ndarray]:
        """Every ensemble tensor of one image (see :func:`replay`)."""
        return replay(client, [step for step, _ in self.steps], self.request.inputs([data]))

    def read(self, client: TritonClient, data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        values = self.replay_steps(client, data)
        ensemble = self.scores(client, [data])[0]
        replayed = np.asarray(values[self.scores_output], np.float32).reshape(-1)
        trusted = replayed.shape == ensemble.shape and np.allclose(replayed, ensemble, rtol=REPLAY_RTOL, atol=REPLAY_ATOL)
        diff = float(np.abs(replayed - ensemble).max()) if replayed.shape == ensemble.shape else float("inf")
        self.replay.add(image, diff, trusted)
        out = {}
        if trusted:
            for step, info in self.steps:
                for name, ensemble_name in step.outputs.items():
                    mapping = self._compared.get((step.model, name))
                    if mapping is not None and mapping.stage is not Stage.OUTPUT:
                        out[mapping.stage] = mapping.to_stage(unbatch(values[ensemble_name], info))
        out[Stage.OUTPUT] = ensemble
        return out

    def isolate(self, client: TritonClient, stage: Stage, previous: np.ndarray) -> np.ndarray:
        iso = self.isolations[stage]
        tensor = iso.step.input(iso.input_name)
        array = iso.source.from_stage(previous, numpy_dtype(tensor.data_type))
        out = client.infer(iso.step.name, {iso.input_name: array[None] if iso.step.batched else array}, [iso.output_name])
        return iso.target.to_stage(unbatch(out[iso.output_name], iso.step))


def replay(client: TritonClient, steps: list[Step], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An ensemble's tensors, each step model called with the earlier steps' outputs, from
    the ensemble's ``inputs``; keys are the ensemble's tensor names, values as the steps
    return them (batch dimension kept)."""
    values = dict(inputs)
    for step in steps:
        outputs = client.infer(step.model, {name: values[tensor] for name, tensor in step.inputs.items()},
                               list(step.outputs))
        values.update({tensor: outputs[name] for name, tensor in step.outputs.items()})
    return values


def unbatch(array: np.ndarray, info: ModelInfo) -> np.ndarray:
    return array[0] if info.batched else array


def ordered_steps(info: ModelInfo) -> list[Step]:
    """The ensemble's steps in an order where every step's inputs exist before it runs."""
    available, todo, order = {t.name for t in info.inputs}, list(info.steps), []
    while todo:
        ready = [s for s in todo if set(s.inputs.values()) <= available]
        if not ready:
            missing = sorted({v for s in todo for v in s.inputs.values()} - available)
            raise DeploymentError(f"ensemble {info.name!r}: no step can run next; tensors never produced: {missing}")
        for step in ready:
            order.append(step)
            available |= set(step.outputs.values())
            todo.remove(step)
    return order


def discover(client: TritonClient, model: str, probe: bytes, input_size: tuple[int, int],
             scores: str | None = None, overrides: Mapping[str, str] | None = None,
             reference: Mapping[str, np.ndarray] | None = None, sources: Mapping[str, str] | None = None,
             task: str | None = None) -> Deployment:
    """The deployment ``model`` on ``client``'s server, read from its config, with one probe
    image run through it to match step outputs to stages. ``input_size``: the model input's
    (height, width) where the model's config does not fix it; ``task``: ``--task`` (None: the
    one the outputs show, :func:`~harness.deployment.discovery.task_output`); ``scores``: the
    output the task reads (default: found); ``overrides``: ``{step or step.tensor: stage}``,
    set where ``sources`` says (default ``--stage``); ``reference``: the reference's stages of
    the probe, the evidence each step output's scale and stage are read against
    (:mod:`harness.deployment.mapping`). Raises :class:`DeploymentError`."""
    info = read_model(client, model)
    request = ImageRequest(model, image_input(info), info.batched)
    chosen, out, _ = task_output(info, task, scores)
    probe_scores = _probe(lambda: client.infer(model, request.inputs([probe]), [out.name])[out.name], model)
    kind = chosen.output_kind(out.name, probe_scores)
    if not info.is_ensemble:
        return ModelDeployment(info, request, out, kind, chosen)
    steps = []
    for step in ordered_steps(info):
        if not client.is_ready(step.model):
            raise DeploymentError(f"step {step.model!r} of ensemble {model!r} is not ready on {client.url}: the "
                                  "ensemble cannot be replayed step by step")
        steps.append((step, read_model(client, step.model)))
    values = _probe(lambda: replay(client, [step for step, _ in steps], request.inputs([probe])), model)
    outputs = [(step.model, name, ens, unbatch(values[ens], step_info), ens in _classifier_inputs(steps, out.name),
                ens == out.name) for step, step_info in steps for name, ens in step.outputs.items()]
    mappings = map_outputs(info.name, outputs, decoded_size(probe), input_size, dict(overrides or {}), reference,
                           dict(sources or {}))
    scoring = next((pair for pair in steps if out.name in pair[0].outputs.values()), None)
    if reference is not None and scoring is not None and len(scoring[0].inputs) == 1:
        step, step_info = scoring
        (name, ens), = step.inputs.items()
        produced = next(own for own, e in step.outputs.items() if e == out.name)
        fed = next((i for i, output in enumerate(outputs) if output[2] == ens), None)

        def answer(array: np.ndarray) -> np.ndarray:
            sent = {name: array[None] if step_info.batched else array}
            return unbatch(client.infer(step.model, sent, [produced])[produced], step_info)

        if fed is not None:
            mappings[fed] = expected_input(mappings[fed], numpy_dtype(step_info.input(name).data_type), answer, reference,
                                           kind, set(overrides or {}))
    return StepwiseDeployment(info, request, out, kind, steps, mappings, _isolations(steps, mappings), chosen)


def expected_input(mapping: TensorMapping, dtype, answer, reference: Mapping[str, np.ndarray], kind: ScoreKind,
                   overridden_keys: set[str] = frozenset()) -> TensorMapping:
    """The classifier's input, read as an image by its values, checked against what the model
    expects: fed the reference's stage in the tensor's encoding, and the reference's normalized
    input in its layout, the model's answers are compared with the reference's (``reference``
    holds ``output``: the reference model on the probe). A model that answers like the
    reference only on the normalized input expects it: the tensor is compared as ``input``
    (the client, or the step before, forgot to normalize), not as an image. ``answer(array)``
    runs the model on one tensor; ``mapping`` is returned as it is when it is not an image
    fed to the classifier, was set by the user, or the check cannot say."""
    if (mapping.stage is None or not mapping.stage.is_image or Stage.OUTPUT not in reference
            or mapping.stage not in reference or Stage.INPUT not in reference or np.dtype(dtype) == np.uint8
            or {mapping.step, f"{mapping.step}.{mapping.tensor}"} & set(overridden_keys)):
        return mapping
    normalized = dataclasses.replace(mapping, stage=Stage.INPUT, scale=1.0)
    expected = kind.from_logits(reference[Stage.OUTPUT])
    try:
        as_image = answer(mapping.from_stage(reference[mapping.stage], dtype))
        as_input = answer(normalized.from_stage(reference[Stage.INPUT], dtype))
    except Exception:  # noqa: BLE001 - only evidence: a model refusing one of them says nothing here
        return mapping
    image_error = float(np.sqrt(np.mean(np.square(np.ravel(as_image) - np.ravel(expected)))))
    input_error = float(np.sqrt(np.mean(np.square(np.ravel(as_input) - np.ravel(expected)))))
    if input_error < 0.5 * image_error:
        return dataclasses.replace(normalized, why=(
            f"{mapping.why}; but the model answers like the reference when fed the reference's normalized input "
            f"(RMSE {input_error:.3g}), not its {mapping.stage} (RMSE {image_error:.3g}): it expects the model input, "
            "so this tensor is compared as input"))
    return mapping


def _probe(call, model: str):
    from harness.client import InferenceError

    try:
        return call()
    except InferenceError as exc:
        raise ProbeRejected(f"{model!r} rejected the probe image: {exc}") from None


def _classifier_inputs(steps, scores_name: str) -> set[str]:
    """The ensemble tensors fed to the step that produces the scores."""
    return {e for step, _ in steps if scores_name in step.outputs.values() for e in step.inputs.values()}


def map_outputs(model: str, outputs, decoded: tuple[int, int] | None, input_size: tuple[int, int],
                overrides: dict[str, str], reference: Mapping[str, np.ndarray] | None,
                sources: Mapping[str, str]) -> list[TensorMapping]:
    """Every output ``(step, name, ensemble tensor, array, fed to the classifier, scores)`` mapped
    to a stage (:func:`~harness.deployment.mapping.map_tensor`), the overrides applied (each
    used once; one left over names no output: :class:`DeploymentError`); of several tensors of
    one stage, the one nearest the model is compared and the earlier ones kept for isolation."""
    mappings = []
    for step, name, _, array, fed, is_scores in outputs:
        mapping = map_tensor(step, name, array, decoded_size=decoded, input_size=input_size, model_input=fed,
                             scores=is_scores, reference=reference)
        for key in (step, f"{step}.{name}"):
            if key in overrides:
                try:
                    mapping = overridden(mapping, overrides.pop(key), array, sources.get(key, "--stage"), reference)
                except ValueError as exc:
                    raise DeploymentError(str(exc)) from None
        mappings.append(mapping)
    if overrides:
        known = [f"{step}[.{name}]" for step, name, *_ in outputs]
        raise DeploymentError(f"--stage {', '.join(overrides)}: no such step output in {model!r}; "
                              f"step outputs: {', '.join(known)}")
    last = {m.stage: m for m in mappings if m.stage is not None}
    return [m if m.stage is None or last[m.stage] is m else
            dataclasses.replace(m, compared=False, why=f"{m.why}; compared at the later {last[m.stage].step}."
                                                       f"{last[m.stage].tensor}, nearer the model")
            for m in mappings]


def _isolations(steps, mappings: list[TensorMapping]) -> dict[Stage, Isolation]:
    """Stage -> how it runs alone: a step with one input holding an earlier stage (or the same
    stage in another tensor: a layout step), whose output is compared as that stage."""
    by_tensor = dict(zip((ens for step, _ in steps for ens in step.outputs.values()), mappings))  # in map_outputs' order
    producer = {ens: (step, info, name) for step, info in steps for name, ens in step.outputs.items()}
    isolations = {}
    for ens, mapping in by_tensor.items():
        step, step_info, name = producer[ens]
        sources = [(n, by_tensor.get(e)) for n, e in step.inputs.items()]
        if mapping.stage is None or not mapping.compared or len(sources) != 1:
            continue
        source = sources[0][1]
        if source is None or source.stage is None:
            continue
        if STAGES.index(source.stage) < STAGES.index(mapping.stage) or (source.stage is mapping.stage
                                                                         and not source.compared):
            isolations[mapping.stage] = Isolation(step_info, sources[0][0], source, name, mapping)
    return isolations
