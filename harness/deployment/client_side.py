"""The client's own preprocessing as the deployed side: ``--client FILE.py:NAME --model MODEL``.

The most common Triton deployment has the client decode and preprocess, and the server run
only the model (an input such as FP32 [3, 224, 224], or several: an image and a scale
factor). The user's client function (file bytes -> the model's input tensor, or a dict of
tensors by input name) is run in this process as the client runs it, and what it returns is
sent to the model. Its tensors are matched to stages by the evidence of
:mod:`harness.deployment.mapping` (a normalized image is ``input``, a 0-255 or 0-1 image
``crop``, a scale factor nothing), the model's answer is ``output``, and isolation feeds the
model the reference's stage in place of the client's image tensor (its other tensors as the
client made them). Standard library, numpy and tritonclient only: the Locust user runs it too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from harness.client import InferenceError
from harness.deployment.base import Deployment
from harness.deployment.discovery import (
    DeploymentError,
    ModelInfo,
    ProbeRejected,
    TensorInfo,
    numpy_dtype,
    read_model,
    task_output,
)
from harness.deployment.mapping import TensorMapping
from harness.deployment.stepwise import decoded_size, expected_input, map_outputs
from harness.errors import call_user, raised
from harness.manifest import load_dalis_nvjpeg
from harness.scores import ScoreKind
from harness.stage import STAGES, Stage
from harness.task_api import Task
from harness.user_code import load_object

if TYPE_CHECKING:
    from harness.client import TritonClient


class ClientError(InferenceError):
    """The client's preprocessing failed on one image, or made tensors the model cannot take:
    the deployed side rejects that image (the message says which and why)."""


class ClientMismatch(ClientError):
    """The client's tensors do not fit the model (names, data types, shapes): not one image's
    problem, the client's and the model's."""


def load_client(ref: str) -> Callable[[bytes], object]:
    """The client function ``file.py:name`` (:class:`~harness.errors.UsageError` if it is not one)."""
    load_dalis_nvjpeg()  # before the client's code imports torchvision, whose nvJPEG would otherwise be DALI's
    function = load_object(ref, "--client", "a client function")
    if not callable(function):
        raise DeploymentError(f"--client {ref}: {type(function).__name__} is not a function of the file's bytes")
    return function


@dataclass(frozen=True)
class ClientRequest:
    """How a file goes into the model: through the client function, its tensors checked
    against the model's inputs (names, data types, shapes). The same interface as
    :class:`~harness.deployment.base.ImageRequest`."""

    model: str
    name: str
    """The client function as the user named it (``file.py:name``)."""
    function: Callable[[bytes], object]
    tensors: tuple[TensorInfo, ...]
    """The model's inputs."""
    batched: bool

    @property
    def kind(self) -> str:
        return "client tensors"

    @property
    def max_images(self) -> int | None:
        return None if self.batched else 1

    def tensors_of(self, data: bytes) -> dict[str, np.ndarray]:
        """The client's tensors for one file, by input name, without a batch dimension;
        :class:`ClientError` when it fails or makes what the model cannot take."""
        try:
            made = call_user(self.function, bytes(data))  # sys.exit() in it fails this image, not the run
        except Exception as exc:  # noqa: BLE001 - the client's own failure on this image is this image's
            # "client NAME failed" first: the error's type where errors are counted by type (the loadtest)
            raise ClientError(f"client {self.name.rpartition(':')[2]} failed: {raised(exc)}") from None
        names = [t.name for t in self.tensors]
        if not isinstance(made, Mapping):
            if len(names) != 1:
                raise ClientMismatch(f"client {self.name} returned one tensor; {self.model} takes {len(names)} inputs "
                                  f"({', '.join(names)}): return a dict of them")
            made = {names[0]: made}
        if set(made) != set(names):
            raise ClientMismatch(f"client {self.name} returned {sorted(made)}; {self.model} takes {names}")
        return {t.name: self._checked(t, made[t.name]) for t in self.tensors}

    def _checked(self, tensor: TensorInfo, value) -> np.ndarray:
        array = np.asarray(value)
        wanted = numpy_dtype(tensor.data_type)
        if array.dtype != wanted:
            raise ClientMismatch(f"client {self.name} made {array.dtype} for {tensor.describe()} of {self.model}: the "
                              f"server takes {wanted} (convert it in the client, as the client sends it)")
        dims = tuple(tensor.dims)
        if array.ndim == len(dims) + 1 and array.shape[0] == 1:
            array = array[0]  # a batch of one, as clients often make it
        if array.ndim != len(dims) or any(d != -1 and d != s for d, s in zip(dims, array.shape)):
            raise ClientMismatch(f"client {self.name} made shape {list(array.shape)} for {tensor.describe()} of "
                              f"{self.model}")
        return np.ascontiguousarray(array)

    def stack(self, made: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """One request's inputs from the tensors of its images (a batch dimension if the model batches)."""
        if not self.batched:
            if len(made) != 1:
                raise ValueError(f"{self.model} is not batched: one image per request, got {len(made)}")
            return dict(made[0])
        return {t.name: np.stack([m[t.name] for m in made]) for t in self.tensors}

    def inputs(self, images: Sequence[bytes]) -> dict[str, np.ndarray]:
        return self.stack([self.tensors_of(data) for data in images])

    def describe(self) -> str:
        batching = "batched" if self.batched else "one image per request"
        return f"{', '.join(t.describe() for t in self.tensors)} made by client {self.name} ({batching})"


class ClientDeployment(Deployment):
    """``--client FILE.py:NAME --model MODEL`` (see the module)."""

    def __init__(self, info: ModelInfo, request: ClientRequest, scores: TensorInfo, kind: ScoreKind,
                 mappings: list[TensorMapping], task=None):
        self.info, self.model, self.request = info, info.name, request
        self.label = f"{info.name} fed by {request.name}"
        self.scores_output, self.scores_kind, self.mappings, self._task = scores.name, kind, mappings, task
        compared = [m for m in mappings if m.stage is not None and m.compared]
        self.stages = tuple(s for s in STAGES if s is Stage.OUTPUT or any(m.stage is s for m in compared))
        # The model alone: fed the reference's stage in place of the one client tensor that holds a stage.
        self._source = compared[0] if len(compared) == 1 else None
        self.isolates = {Stage.OUTPUT: self._source.stage} if self._source else {}
        self._local = threading.local()

    def describe(self) -> list[str]:
        lines = [f"model {self.model}: inputs {self.request.describe()}, {self.task.output_label} {self.scores_output} "
                 f"({self.scores_kind.name})", f"stages exposed: {', '.join(self.stages)}"]
        lines += [f"  {m.describe()}" for m in self.mappings]
        if self._source:
            lines.append(f"run alone on the reference: output ({self.model} fed the reference's {self._source.stage} "
                         f"as {self._source.tensor}" + (", the other inputs as the client made them)"
                                                         if len(self.request.tensors) > 1 else ")"))
        return lines

    def to_dict(self) -> dict:
        return {**super().to_dict(), "client": self.request.name, "inputs": [t.describe() for t in self.request.tensors],
                "mapping": [{"tensor": m.tensor, "stage": m.stage and str(m.stage), "layout": m.layout, "scale": m.scale,
                             "why": m.why, "suggestion": m.suggestion} for m in self.mappings]}

    def read(self, client: "TritonClient", data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        tensors = self.request.tensors_of(data)
        self._local.last = tensors  # what isolate() feeds beside the reference's stage, on this thread
        out = client.infer(self.model, self.request.stack([tensors]), [self.scores_output])[self.scores_output]
        stages = {m.stage: m.to_stage(tensors[m.tensor]) for m in self.mappings
                  if m.stage is not None and m.compared and m.stage is not Stage.OUTPUT}
        stages[Stage.OUTPUT] = self._output(out)
        return stages

    def _output(self, out) -> np.ndarray:
        """The model's output of one image: a vector, or as it is for a task whose raw output keeps its shape (a map)."""
        out = np.asarray(out, np.float32)
        if self.task.output_shaped:
            return out[0] if self.request.batched else out
        return out.reshape(-1)

    def isolate(self, client: "TritonClient", stage: Stage, previous: np.ndarray) -> np.ndarray:
        if stage is not Stage.OUTPUT or self._source is None:
            raise NotImplementedError(f"{self.label} cannot run {stage} alone")
        tensors = dict(getattr(self._local, "last", None) or {})
        source = self.request.tensors[[t.name for t in self.request.tensors].index(self._source.tensor)]
        tensors[source.name] = self._source.from_stage(previous, numpy_dtype(source.data_type))
        out = client.infer(self.model, self.request.stack([tensors]), [self.scores_output])[self.scores_output]
        return self._output(out)


def discover_client(client: "TritonClient", model: str, function_ref: str, probe: bytes, input_size: tuple[int, int],
                    scores: str | None = None, overrides: Mapping[str, str] | None = None,
                    reference: Mapping[str, np.ndarray] | None = None,
                    sources: Mapping[str, str] | None = None, task: str | None = None, *,
                    tasks: Mapping[str, Task]) -> ClientDeployment:
    """``model`` on ``client``'s server fed by the client function ``function_ref``, probed with
    ``probe``: the function's tensors checked against the model's inputs and matched to stages
    (``overrides`` as ``NAME.TENSOR=STAGE``, ``NAME`` the function's name); ``task``: ``--task``
    (None: the one the outputs show, among ``tasks``: the registry). Raises :class:`DeploymentError`."""
    info = read_model(client, model)
    if info.stateful:
        raise DeploymentError(f"model {model!r} uses the sequence batcher (its answer depends on earlier requests): "
                              "the harness checks models that answer each image alone")
    request = ClientRequest(model, function_ref, load_client(function_ref), info.inputs, info.batched)
    chosen, out, _ = task_output(info, task, scores, tasks=tasks)
    if out is None:
        raise DeploymentError(f"--client {function_ref} with --model {model}: the model answers only its result "
                              f"({chosen.result_outputs(info).describe()}); --client compares a model's raw output: "
                              "name it with --output")
    try:
        tensors = request.tensors_of(probe)
        probe_scores = client.infer(model, request.stack([tensors]), [out.name])[out.name]
    except ClientMismatch as exc:
        raise DeploymentError(f"--client {function_ref} with --model {model}: {exc}") from None
    except InferenceError as exc:
        raise ProbeRejected(f"--client {function_ref} with --model {model} rejected the probe image: {exc}") from None
    step = function_ref.rpartition(":")[2]
    outputs = [(step, name, name, array, True, False) for name, array in tensors.items()]
    mappings = map_outputs(f"client {function_ref}", outputs, decoded_size(probe), input_size, dict(overrides or {}),
                           reference, dict(sources or {}))
    kind = chosen.output_kind(out.name, probe_scores)
    images = [i for i, m in enumerate(mappings) if m.stage is not None and m.stage.is_image]
    if reference is not None and len(images) == 1:
        tensor = info.inputs[images[0]]

        def answer(array: np.ndarray) -> np.ndarray:
            sent = request.stack([{**tensors, tensor.name: array}])
            return np.asarray(client.infer(model, sent, [out.name])[out.name]).reshape(-1)

        mappings[images[0]] = expected_input(mappings[images[0]], numpy_dtype(tensor.data_type), answer, reference,
                                             kind, set(overrides or {}))
    return ClientDeployment(info, request, out, kind, mappings, chosen)
