"""Any Triton deployment, read from what it exposes.

An ensemble is replayed step by step: each step model is called directly with the tensors
the previous steps produced, so every intermediate tensor comes from the deployed models
themselves (the harness never re-implements them), and each step output is matched to a
stage (:mod:`harness.deployment.mapping`). The production answer is the ensemble's own; an
image whose replay does not reproduce it keeps only that answer (the ensemble does
something its steps alone do not, so their tensors are not trusted), and the run says how
many. A single model exposes its scores only.

A detector's deployment (a task with :meth:`~harness.task.Task.result_outputs`: boxes and
scores, EfficientNMS, quads) is read by output name: its boxes are the ``postprocess`` stage,
its raw output (a map, a head) ``output``. An ensemble answering only boxes has its raw
output inside: the tensor the step making the boxes takes from an earlier step (not an image;
of several, a map beside a size or a scale, the one holding the most values), read from the
replay. The replay is trusted when it reproduces the ensemble's whole answer (boxes, scores,
and what else it answers). A step taking several inputs (the postprocessing's map and the
letterbox record; a resize's image and the original size) runs alone fed the reference's
stage for the one input that holds a stage, its other inputs as the deployment's own replay
made them for the same image.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from harness.client import InferenceError, TritonClient
from harness.deployment.base import Deployment, ImageRequest, NotComparable
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
from harness.deployment.mapping import TensorMapping, image_layout, map_tensor, overridden
from harness.scores import ScoreKind
from harness.stage import GEOMETRY_TENSOR, STAGES, Stage
from harness.task_api import Task

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
    """How often the step-by-step replay reproduced the ensemble's scores (``what``: its answer,
    for a deployment answering boxes)."""

    images: int = 0
    mismatched: list[str] = field(default_factory=list)
    max_abs_diff: float = 0.0
    what: str = "scores"
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
            return (f"step-by-step replay reproduced the ensemble's {self.what} on all {self.images} images "
                    f"(max |diff| {self.max_abs_diff:.3g}): the step stages are the deployment's")
        return (f"step-by-step replay did NOT reproduce the ensemble's {self.what} on {len(self.mismatched)} of "
                f"{self.images} images (max |diff| {self.max_abs_diff:.3g}): the ensemble does something its steps "
                "alone do not; those images' step stages are not trusted and only their output is compared")


class ModelDeployment(Deployment):
    """A single model (not an ensemble) taking the file: only its scores can be compared (a
    detector's raw output and boxes, those it answers)."""

    stages = (Stage.OUTPUT,)

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo | None, kind: ScoreKind, task=None,
                 box_outputs=None, extras: tuple[str, ...] = ()):
        self.info, self.model, self.label, self.request = info, info.name, info.name, request
        self.scores_output, self.scores_kind, self._task = scores.name if scores else None, kind, task
        self.box_outputs, self.extras = box_outputs, extras
        if box_outputs is not None:
            self.stages = (*((Stage.OUTPUT,) if scores else ()), Stage.POSTPROCESS)

    def read(self, client: TritonClient, data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        if self.box_outputs is None and not self.task.output_shaped:
            return {Stage.OUTPUT: self.scores(client, [data])[0]}
        return self.answer_stages(self.answer(client, data))

    def describe(self) -> list[str]:
        if self.box_outputs is not None:
            result = self.task.result_words
            shown = f"the raw output and {result} are" if self.scores_output else f"only {result} are"
        else:
            label = self.task.output_label
            shown = f"only the {label} {'are' if label.endswith('s') else 'is'}"
        return [*super().describe(), f"{self.model} is a single {self.info.platform} model: its internal stages "
                                     f"are hidden; {shown} compared"]


@dataclass(frozen=True)
class Isolation:
    """How one stage runs alone: the step producing it, fed the reference's ``source`` stage
    as ``input_name``, its ``others`` inputs (step input -> ensemble tensor) as the deployment's
    own replay of the image made them."""

    step: ModelInfo
    input_name: str
    source: TensorMapping
    output_name: str
    target: TensorMapping
    others: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ResultIsolation:
    """How the step answering the result (a detector's boxes) runs alone: fed the reference's
    ``output`` as ``input_name``, its ``others`` inputs (step input -> ensemble tensor) as the
    deployment's replay made them; ``outputs``: its own output names -> the ensemble's."""

    step: ModelInfo
    input_name: str
    others: Mapping[str, str]
    outputs: Mapping[str, str]
    source: str = ""
    """The ensemble tensor ``input_name`` takes in the deployment (its own raw output)."""

    @property
    def geometry_input(self) -> str | None:
        """The step's input holding this project's ``GEOMETRY`` record (what the resize did,
        :class:`harness.geometry.Geometry`): the reference's own is fed there, so each side's
        raw output is postprocessed with its own geometry. None: the step takes none."""
        return next((own for own, ens in self.others.items() if GEOMETRY_TENSOR in (own, ens)), None)


class StepwiseDeployment(Deployment):
    """An ensemble replayed step by step (see the module)."""

    def __init__(self, info: ModelInfo, request: ImageRequest, scores: TensorInfo | None, kind: ScoreKind,
                 steps: list[tuple[Step, ModelInfo]], mappings: list[TensorMapping], isolations: dict[Stage, Isolation],
                 task=None, box_outputs=None, raw: str | None = None, result: ResultIsolation | None = None,
                 extras: tuple[str, ...] = ()):
        """``scores``: the ensemble output the task reads (None: it answers only ``box_outputs``);
        ``raw``: the ensemble tensor holding the raw output (that output, or a tensor inside);
        ``result``: how the step answering the boxes runs alone."""
        self.info, self.model, self.label, self.request = info, info.name, info.name, request
        self.scores_output = scores.name if scores else raw
        self.scores_kind, self._task, self.raw_answered = kind, task, scores is not None
        self.box_outputs, self.extras, self.result = box_outputs, extras, result
        self.steps, self.mappings, self.isolations = steps, mappings, isolations
        self._compared = {(m.step, m.tensor): m for m in mappings if m.stage is not None and m.compared}
        self._raw_batch = any(m.batch_of_one for m in self._compared.values() if m.stage is Stage.OUTPUT)
        """The raw output carries its unbatched step's batch axis of one: read without it."""
        self.stages = tuple(s for s in STAGES if (s is Stage.OUTPUT and self.scores_output)
                            or any(m.stage is s for m in self._compared.values()))
        self.isolates = {stage: iso.source.stage for stage, iso in isolations.items()}
        if result is not None:  # with the reference's geometry where the step takes this project's record
            self.isolates[Stage.POSTPROCESS] = (Stage.OUTPUT, GEOMETRY_TENSOR) if result.geometry_input else Stage.OUTPUT
        self._producer = {ens: step_info for step, step_info in steps for ens in step.outputs.values()}
        self._fed = {e for iso in isolations.values() for e in iso.others.values()} | set(
            (*result.others.values(), result.source) if result else ())
        """The ensemble tensors the isolated steps take from the replay (kept per thread between
        :meth:`read` and :meth:`isolate` of one image)."""
        self._local = threading.local()
        self.replay = ReplayStats(what="answer" if box_outputs is not None else
                                  "output" if self.task.output_shaped else "scores")

    @property
    def _detector(self) -> bool:
        return self.box_outputs is not None or self.task.output_shaped

    def describe(self) -> list[str]:
        lines = [*super().describe(), f"ensemble steps: {' -> '.join(step.model for step, _ in self.steps)}"]
        lines += [f"  {m.describe()}" for m in self.mappings]
        runs = [f"{stage} ({iso.step.name} fed the reference's {iso.source.stage}"
                + (f" as {iso.source.step}.{iso.source.tensor} holds it" if iso.source.stage is stage else "")
                + (f"; {', '.join(iso.others)} as the replay made them" if iso.others else "") + ")"
                for stage, iso in self.isolations.items()]
        if self.result is not None:
            r = self.result
            replayed = [n for n in r.others if n != r.geometry_input]
            runs.append(f"postprocess ({r.step.name} fed the reference's output as {r.input_name}"
                        + (f" and the reference's geometry as {r.geometry_input}" if r.geometry_input else "")
                        + (f"; {', '.join(replayed)} as the deployment's replay made them for the image" if replayed
                           else "") + ")")
        if runs:
            lines.append("run alone on the reference: " + ", ".join(runs))
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
        self._local.fed = {e: values[e] for e in self._fed}  # what isolate() feeds beside the reference's stage
        if self._detector:
            answer = self.answer(client, data)
            trusted, diff = _reproduces({n: unbatch(values[n], self._producer[n]) for n in answer}, answer)
            out = self.answer_stages(answer)
            if trusted and self.scores_output and not self.raw_answered:
                raw = np.asarray(unbatch(values[self.scores_output], self._producer[self.scores_output]), np.float32)
                out[Stage.OUTPUT] = raw[0] if self._raw_batch else raw
        else:
            ensemble = self.scores(client, [data])[0]
            replayed = np.asarray(values[self.scores_output], np.float32).reshape(-1)
            trusted = replayed.shape == ensemble.shape and np.allclose(replayed, ensemble, rtol=REPLAY_RTOL,
                                                                       atol=REPLAY_ATOL)
            diff = float(np.abs(replayed - ensemble).max()) if replayed.shape == ensemble.shape else float("inf")
            out = {Stage.OUTPUT: ensemble}
        self.replay.add(image, diff, trusted)
        if trusted:
            for step, info in self.steps:
                for name, ensemble_name in step.outputs.items():
                    mapping = self._compared.get((step.model, name))
                    if mapping is not None and mapping.stage not in (Stage.OUTPUT, Stage.POSTPROCESS):
                        out[mapping.stage] = mapping.to_stage(unbatch(values[ensemble_name], info))
        return out

    def _replayed(self, names) -> dict[str, np.ndarray]:
        fed = getattr(self._local, "fed", None)
        if fed is None:
            raise ValueError(f"{self.model}: a step runs alone beside the deployment's own tensors of the image, "
                             "read first (Deployment.read)")
        return {name: fed[ensemble] for name, ensemble in names.items()}

    def isolate(self, client: TritonClient, stage: Stage, previous: np.ndarray) -> np.ndarray:
        if stage is Stage.POSTPROCESS and self.result is not None:
            r = self.result
            tensor = r.step.input(r.input_name)
            given = previous if isinstance(previous, Mapping) else {Stage.OUTPUT: previous}
            raw = np.asarray(given[Stage.OUTPUT], numpy_dtype(tensor.data_type))
            others = self._replayed(r.others)
            if r.geometry_input:
                geometry = r.step.input(r.geometry_input)
                others[r.geometry_input] = _fit(np.asarray(given[GEOMETRY_TENSOR], numpy_dtype(geometry.data_type)),
                                                geometry.dims, r.step.batched)
            elif r.source:
                own = np.asarray(unbatch(self._replayed({"raw": r.source})["raw"], self._producer[r.source]))
                if _squeezed(own.shape) != _squeezed(raw.shape):
                    raise NotComparable(
                        f"{r.step.name} alone: the reference's raw output is {_squeezed(raw.shape)}, the deployment's "
                        f"{_squeezed(own.shape)}; its {', '.join(r.others)} describe the deployment's own resize, not "
                        "the reference's, so it cannot run on the reference's output")
            sent = {r.input_name: _fit(raw, tensor.dims, r.step.batched), **others}
            wanted = [own for own, ens in r.outputs.items() if ens in self.box_outputs.names]
            out = client.infer(r.step.name, sent, wanted)
            answer = {r.outputs[own]: unbatch(value, r.step) for own, value in out.items()}
            return self.task.read_answer(answer, self.box_outputs)[Stage.POSTPROCESS]
        iso = self.isolations[stage]
        tensor = iso.step.input(iso.input_name)
        array = iso.source.from_stage(previous, numpy_dtype(tensor.data_type))
        sent = {iso.input_name: array[None] if iso.step.batched else array, **self._replayed(iso.others)}
        out = unbatch(client.infer(iso.step.name, sent, [iso.output_name])[iso.output_name], iso.step)
        if iso.target.stage is Stage.OUTPUT and self.task.output_shaped:  # a map or a head keeps its shape
            return np.asarray(out[0] if iso.target.batch_of_one else out, np.float32)
        return iso.target.to_stage(out)


def _reproduces(replayed: Mapping[str, np.ndarray], answer: Mapping[str, np.ndarray]) -> tuple[bool, float]:
    """(the replay's tensors equal the answer's within the replay tolerance, NaN where NaN; the
    largest difference of the finite values)."""
    trusted, diff = True, 0.0
    for name, value in answer.items():
        mine, theirs = np.asarray(replayed[name]), np.asarray(value)
        if mine.shape != theirs.shape:
            return False, float("inf")
        if mine.dtype.kind in "fc" or theirs.dtype.kind in "fc":
            a, b = mine.astype(np.float64), theirs.astype(np.float64)
            trusted &= bool(np.allclose(a, b, rtol=REPLAY_RTOL, atol=REPLAY_ATOL, equal_nan=True))
            finite = np.isfinite(a) & np.isfinite(b)
            diff = max(diff, float(np.abs(a[finite] - b[finite]).max()) if finite.any() else 0.0)
        else:
            trusted &= bool(np.array_equal(mine, theirs))
    return trusted, diff


def _squeezed(shape) -> tuple[int, ...]:
    """A shape without its axes of one (a map [1, H, W] and [H, W] are the same map)."""
    return tuple(n for n in shape if n != 1)


def _fit(array: np.ndarray, dims, batched: bool) -> np.ndarray:
    """``array`` (one image, the reference's shape) with leading axes of one added or removed to
    the rank a step's input takes (``dims``, plus the batch axis when it batches)."""
    rank = len(dims) + (1 if batched else 0)
    while array.ndim < rank:
        array = array[None]
    while array.ndim > rank and array.shape[0] == 1:
        array = array[0]
    return np.ascontiguousarray(array)


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
             task: str | None = None, *, tasks: Mapping[str, Task]) -> Deployment:
    """The deployment ``model`` on ``client``'s server, read from its config, with one probe
    image run through it to match step outputs to stages. ``input_size``: the model input's
    (height, width) where the model's config does not fix it; ``task``: ``--task`` (None: the
    one the outputs show among ``tasks``, the registry: :func:`~harness.deployment.discovery.task_output`); ``scores``: the
    output the task reads (default: found); ``overrides``: ``{step or step.tensor: stage}``,
    set where ``sources`` says (default ``--stage``); ``reference``: the reference's stages of
    the probe, the evidence each step output's scale and stage are read against
    (:mod:`harness.deployment.mapping`). Raises :class:`DeploymentError`."""
    info = read_model(client, model)
    request = ImageRequest(model, image_input(info), info.batched)
    chosen, out, _ = task_output(info, task, scores, tasks=tasks)
    boxes = chosen.result_outputs(info, scores)
    extras = tuple(name for name in chosen.answer_extras if any(t.name == name for t in info.outputs)
                   and (boxes is None or name not in boxes.names))
    asked = [*([out.name] if out else []), *(boxes.names if boxes is not None else ())]
    probe_answer = _probe(lambda: client.infer(model, request.inputs([probe]), asked), model)
    if boxes is not None:
        boxes = chosen.settle_results(boxes, {k: v[0] if info.batched else v for k, v in probe_answer.items()},
                                      decoded_size(probe))
    kind = chosen.output_kind(out.name if out else None, probe_answer[out.name] if out else None)
    if -1 in tuple(input_size) and reference is not None and Stage.INPUT in reference:
        input_size = tuple(np.asarray(reference[Stage.INPUT]).shape[-2:])  # a detector's input follows the image
    if not info.is_ensemble:
        return ModelDeployment(info, request, out, kind, chosen, boxes, extras)
    steps = []
    for step in ordered_steps(info):
        if not client.is_ready(step.model):
            raise DeploymentError(f"step {step.model!r} of ensemble {model!r} is not ready on {client.url}: the "
                                  "ensemble cannot be replayed step by step")
        steps.append((step, read_model(client, step.model)))
    values = _probe(lambda: replay(client, [step for step, _ in steps], request.inputs([probe])), model)
    raw = out.name if out else _raw_tensor(steps, boxes, values)
    # The map the step making the boxes takes: the raw output, unless the ensemble answers a copy
    # of it made by that same step (an output no step consumes: Triton's ensemble pruning); the
    # model is the step making that map.
    fed_raw = raw if raw and (boxes is None or any(raw in step.inputs.values() for step, _ in steps)) else (
        _raw_tensor(steps, boxes, values) if boxes is not None else None)
    fed_to_model = _classifier_inputs(steps, fed_raw or raw) if raw else set()
    outputs = [(step.model, name, ens, unbatch(values[ens], step_info), ens in fed_to_model, ens == raw)
               for step, step_info in steps for name, ens in step.outputs.items()]
    mappings = map_outputs(info.name, outputs, decoded_size(probe), input_size, dict(overrides or {}), reference,
                           dict(sources or {}))
    if boxes is not None or chosen.output_shaped:
        mappings = _result_mappings(mappings, outputs, boxes, raw, out is not None, steps, chosen.noun)
    model_output = fed_raw or raw
    scoring = next((pair for pair in steps if model_output in pair[0].outputs.values()), None) if raw else None
    if reference is not None and scoring is not None and len(scoring[0].inputs) == 1:
        step, step_info = scoring
        (name, ens), = step.inputs.items()
        produced = next(own for own, e in step.outputs.items() if e == model_output)
        fed = next((i for i, output in enumerate(outputs) if output[2] == ens), None)

        def answer(array: np.ndarray) -> np.ndarray:
            sent = {name: array[None] if step_info.batched else array}
            return unbatch(client.infer(step.model, sent, [produced])[produced], step_info)

        if fed is not None:
            mappings[fed] = expected_input(mappings[fed], numpy_dtype(step_info.input(name).data_type), answer, reference,
                                           kind, set(overrides or {}))
    result = _result_isolation(steps, boxes, fed_raw) if boxes is not None and fed_raw else None
    isolations = _isolations(steps, mappings)
    if fed_raw and fed_raw != raw and Stage.OUTPUT not in isolations:  # the model alone, not the copying step
        isolations.update(_isolations(steps, mappings, {fed_raw: next(m for m, o in zip(mappings, outputs)
                                                                     if o[2] == raw)}))
    return StepwiseDeployment(info, request, out, kind, steps, mappings, isolations, chosen, boxes, raw, result,
                              extras)


def _box_step(steps, boxes) -> tuple[Step, ModelInfo] | None:
    """The step answering every one of ``boxes``' outputs, or None (they come from several)."""
    return next(((step, info) for step, info in steps if set(boxes.names) <= set(step.outputs.values())), None)


def _raw_tensor(steps, boxes, values: Mapping[str, np.ndarray]) -> str | None:
    """The raw output inside an ensemble answering only boxes: the tensor the step making them
    takes from an earlier step that is not an image (a normalized input fed to a model with NMS
    inside is not its raw output); of several (a map beside a size or a scale), the one holding
    the most values. None when there is none."""
    found = _box_step(steps, boxes)
    if found is None:
        return None
    producer = {ens: info for step, info in steps for ens in step.outputs.values()}
    candidates = [ens for ens in found[0].inputs.values() if ens in producer
                  and np.asarray(values[ens]).dtype.kind == "f"
                  and image_layout(tuple(unbatch(values[ens], producer[ens]).shape)) is None]
    return max(candidates, key=lambda ens: np.asarray(values[ens]).size, default=None)


def _result_mappings(mappings: list[TensorMapping], outputs, boxes, raw: str | None, answered: bool,
                     steps, noun: str = "the result") -> list[TensorMapping]:
    """The mappings with the boxes' tensors (``boxes``, None: none) as ``postprocess`` and the
    raw output's reason in a detector's words."""
    post = _box_step(steps, boxes) if boxes is not None else None
    out = []
    for mapping, (_, _, ens, array, _, _) in zip(mappings, outputs):
        kind = f"{array.dtype} {list(array.shape)}"
        if boxes is not None and ens in boxes.names:
            mapping = dataclasses.replace(mapping, stage=Stage.POSTPROCESS, layout=None, compared=True, suggestion=None,
                                          why=f"{kind}: the deployment's result ({boxes.describe()})")
        elif ens == raw and mapping.stage is Stage.OUTPUT and not mapping.why.startswith("set by"):
            taker = post[0].model if post else "the step making the result"
            why = (f"{kind}: the raw output, answered by the ensemble" + ("" if boxes else f", {noun} made of it here")
                   if answered else
                   f"{kind}: the raw output, the tensor {mapping.step} makes and {taker} takes; the ensemble answers "
                   "only its result, so it is read from the step-by-step replay")
            mapping = dataclasses.replace(mapping, why=why)
        out.append(mapping)
    return out


def _result_isolation(steps, boxes, raw: str) -> ResultIsolation | None:
    """How the step making the boxes runs alone on the reference's output: fed as the input
    ``raw`` goes into, its other inputs from the replay."""
    found = _box_step(steps, boxes)
    if found is None or raw not in found[0].inputs.values():
        return None
    step, info = found
    name = next(n for n, ens in step.inputs.items() if ens == raw)
    return ResultIsolation(info, name, {n: ens for n, ens in step.inputs.items() if n != name}, dict(step.outputs), raw)


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
        # An unbatched step's NCHW (or NHWC) tensor of one image: mapped as a batched step's is.
        batch_of_one = np.ndim(array) == 4 and np.shape(array)[0] == 1
        one = np.asarray(array)[0] if batch_of_one else array
        mapping = map_tensor(step, name, one, decoded_size=decoded, input_size=input_size, model_input=fed,
                             scores=is_scores, reference=reference)
        for key in (step, f"{step}.{name}"):
            if key in overrides:
                try:
                    mapping = overridden(mapping, overrides.pop(key), one, sources.get(key, "--stage"), reference)
                except ValueError as exc:
                    raise DeploymentError(str(exc)) from None
        mappings.append(dataclasses.replace(mapping, batch_of_one=True) if batch_of_one else mapping)
    if overrides:
        known = [f"{step}[.{name}]" for step, name, *_ in outputs]
        raise DeploymentError(f"--stage {', '.join(overrides)}: no such step output in {model!r}; "
                              f"step outputs: {', '.join(known)}")
    last = {m.stage: m for m in mappings if m.stage is not None}
    return [m if m.stage is None or last[m.stage] is m else
            dataclasses.replace(m, compared=False, why=f"{m.why}; compared at the later {last[m.stage].step}."
                                                       f"{last[m.stage].tensor}, nearer the model")
            for m in mappings]


def _isolations(steps, mappings: list[TensorMapping],
                targets: Mapping[str, TensorMapping] | None = None) -> dict[Stage, Isolation]:
    """Stage -> how it runs alone: a step one of whose inputs holds an earlier stage (or the same
    stage in another tensor: a layout step), whose output is compared as that stage; the step's
    other inputs, none of which holds a stage (an original size, a scale), are fed as the
    replay made them. The result stage runs alone by :class:`ResultIsolation`. ``targets``:
    only these ensemble tensors, each compared as the mapping given (the model's own map, when
    the ensemble answers a later step's copy of it)."""
    by_tensor = dict(zip((ens for step, _ in steps for ens in step.outputs.values()), mappings))  # in map_outputs' order
    producer = {ens: (step, info, name) for step, info in steps for name, ens in step.outputs.items()}
    isolations = {}
    for ens, mapping in (targets or by_tensor).items():
        step, step_info, name = producer[ens]
        if mapping.stage is None or not mapping.compared or mapping.stage is Stage.POSTPROCESS:
            continue
        staged = [(n, by_tensor[e]) for n, e in step.inputs.items() if e in by_tensor and by_tensor[e].stage is not None]
        if len(staged) != 1:
            continue
        input_name, source = staged[0]
        if STAGES.index(source.stage) < STAGES.index(mapping.stage) or (source.stage is mapping.stage
                                                                         and not source.compared):
            others = {n: e for n, e in step.inputs.items() if n != input_name}
            isolations[mapping.stage] = Isolation(step_info, input_name, source, name, mapping, others)
    return isolations
