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

import io
import threading
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from harness.client import TritonClient
from harness.deployment.base import Deployment, ImageRequest
from harness.deployment.discovery import DeploymentError, ModelInfo, Step, TensorInfo, image_input, read_model, task_output
from harness.deployment.mapping import TensorMapping, map_tensor, overridden
from harness.stage import STAGES, Stage

REPLAY_RTOL = REPLAY_ATOL = 1e-4
"""How close the replay's scores must come to the ensemble's to trust the step tensors
(the same models on the same tensors: only a nondeterministic step differs)."""


def numpy_dtype(data_type: str) -> np.dtype:
    from tritonclient.utils import triton_to_np_dtype

    name = data_type.removeprefix("TYPE_")
    return np.dtype(triton_to_np_dtype("BYTES" if name == "STRING" else name))


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

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo, kind: str, task=None):
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

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo, kind: str,
                 steps: list[tuple[Step, ModelInfo]], mappings: list[TensorMapping], isolations: dict[Stage, Isolation],
                 task=None):
        self.info, self.model, self.label, self.request = info, info.name, info.name, request
        self.scores_output, self.scores_kind, self._task = scores.name, kind, task
        self.steps, self.mappings, self.isolations = steps, mappings, isolations
        self._compared = {(m.step, m.tensor): m for m in mappings if m.stage is not None}
        self.stages = tuple(s for s in STAGES if s is Stage.OUTPUT or any(m.stage is s for m in self._compared.values()))
        self.isolates = {stage: iso.source.stage for stage, iso in isolations.items()}
        self.replay = ReplayStats()

    def describe(self) -> list[str]:
        lines = [*super().describe(), f"ensemble steps: {' -> '.join(step.model for step, _ in self.steps)}"]
        lines += [f"  {m.describe()}" for m in self.mappings]
        if self.isolates:
            lines.append("run alone on the reference: " + ", ".join(
                f"{stage} ({iso.step.name} fed the reference's {iso.source.stage})" for stage, iso in self.isolations.items()))
        return lines

    def to_dict(self) -> dict:
        return {**super().to_dict(), "steps": [{"model": step.model, "platform": info.platform,
                                                "inputs": step.inputs, "outputs": step.outputs}
                                               for step, info in self.steps],
                "mapping": [{"step": m.step, "tensor": m.tensor, "stage": m.stage and str(m.stage), "layout": m.layout,
                             "why": m.why} for m in self.mappings],
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
             scores: str | None = None, overrides: Mapping[str, str] | None = None, task: str | None = None) -> Deployment:
    """The deployment ``model`` on ``client``'s server, read from its config, with one probe
    image run through it to match step outputs to stages. ``input_size``: the model input's
    (height, width) where the model's config does not fix it; ``task``: ``--task`` (None: the
    one the outputs show, :func:`~harness.deployment.discovery.task_output`); ``scores``: the
    output the task reads (default: found); ``overrides``: ``{step or step.tensor: stage}``.
    Raises :class:`DeploymentError`."""
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
    mappings, isolations = _map_steps(info, steps, values, out.name, decoded_size(probe), input_size, dict(overrides or {}))
    return StepwiseDeployment(info, request, out, kind, steps, mappings, isolations, chosen)


def _probe(call, model: str):
    from harness.client import InferenceError

    try:
        return call()
    except InferenceError as exc:
        raise DeploymentError(f"{model!r} rejected the probe image: {exc}") from None


def _map_steps(info: ModelInfo, steps, values: dict[str, np.ndarray], scores_name: str,
               decoded: tuple[int, int] | None, input_size: tuple[int, int],
               overrides: dict[str, str]) -> tuple[list[TensorMapping], dict[Stage, Isolation]]:
    producer = {ens: (step, step_info, name) for step, step_info in steps for name, ens in step.outputs.items()}
    classifier_inputs = set(producer[scores_name][0].inputs.values()) if scores_name in producer else set()
    mappings, by_tensor = [], {}
    for step, step_info in steps:
        for name, ens in step.outputs.items():
            array = unbatch(values[ens], step_info)
            mapping = map_tensor(step.model, name, array, decoded_size=decoded, input_size=input_size,
                                 model_input=ens in classifier_inputs, scores=ens == scores_name)
            for key in (step.model, f"{step.model}.{name}"):
                if key in overrides:
                    try:
                        mapping = overridden(mapping, overrides.pop(key), array)
                    except ValueError as exc:
                        raise DeploymentError(str(exc)) from None
            mappings.append(mapping)
            by_tensor[ens] = mapping
    if overrides:
        known = [f"{step.model}[.{name}]" for step, _ in steps for name in step.outputs]
        raise DeploymentError(f"--stage {', '.join(overrides)}: no such step output in {info.name!r}; "
                              f"step outputs: {', '.join(known)}")
    # A stage read from several tensors is compared on the last (nearest the model).
    last = {m.stage: m for m in mappings if m.stage is not None}
    mappings = [m if m.stage is None or last[m.stage] is m else
                TensorMapping(m.step, m.tensor, None, m.layout, f"{m.why}; {m.stage} is read from the later "
                              f"{last[m.stage].step}.{last[m.stage].tensor}") for m in mappings]
    by_tensor = {ens: next(m for m in mappings if (m.step, m.tensor) == (b.step, b.tensor)) for ens, b in by_tensor.items()}
    isolations = {}
    for ens, mapping in by_tensor.items():
        step, step_info, name = producer[ens]
        sources = [(n, by_tensor.get(e)) for n, e in step.inputs.items()]
        if mapping.stage is None or len(sources) != 1 or sources[0][1] is None or sources[0][1].stage is None:
            continue
        if STAGES.index(sources[0][1].stage) < STAGES.index(mapping.stage):
            isolations[mapping.stage] = Isolation(step_info, sources[0][0], sources[0][1], name, mapping)
    return mappings, isolations
