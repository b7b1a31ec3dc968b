"""Talking to the deployed server over HTTP or gRPC with tritonclient.

:class:`TritonClient` hides the protocol difference and knows the repository's contract:
ensembles ``classify_<pipeline>``, the preprocessing taps, and the tensor names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from harness.errors import HarnessError
from harness.packing import pack_images
from harness.preprocessing import TAP_TENSORS
from harness.task_api.models import ShippedModel

PROTOCOLS = ("http", "grpc")
IMAGE = "IMAGE"
LOGITS = "LOGITS"
PROBABILITIES = "PROBABILITIES"


@dataclass(frozen=True)
class Pipeline:
    """One deployed preprocessing path and the models that expose it."""

    name: str
    ensemble: str
    taps_model: str
    """A model returning every preprocessing stage (DALI cannot skip outputs, so the DALI
    path has a separate taps model; the OpenCV model computes only what is requested)."""


PIPELINES = {
    "dali": Pipeline("dali", "classify_dali", "preprocess_dali_taps"),
    "opencv": Pipeline("opencv", "classify_opencv", "preprocess_opencv"),
}
CLASSIFIER = "classifier"


@dataclass(frozen=True)
class TaskModels:
    """This repository's models of one task (:attr:`harness.task.Task.repository`): the ensemble of each
    pipeline (``<prefix>_<pipeline>``), the model they end in, the outputs read, the spec
    their preprocessing reads and the models that tap it."""

    prefix: str
    model: str
    model_input: str
    model_output: str
    ensemble_output: str
    """The ensemble output holding the raw ``output`` stage."""
    spec: str = "preprocessing.toml"
    """The spec file (at the repository root) this task's models read."""
    preprocess_prefix: str = ""
    """The preprocessing models' names start with this (``detect_``): ``<prefix>preprocess_dali_taps``."""
    results: tuple[str, ...] = ()
    """The ensemble outputs holding the task's result, when the server computes it (a
    detector's ``BOXES`` and ``SCORES``: the ``postprocess`` stage)."""
    postprocess_model: str | None = None
    """The model computing :attr:`results` from the raw output (run alone on the reference's)."""
    added: tuple[str, ...] = ()
    """The models this task brings to the repository (``preflight --task`` checks them ready; the
    repository's models are those of every registered task: :func:`harness.task.shipped_models`).
    The default task's (classification's) are the repository's base, which the other tasks'
    pipelines may share (``validate_image``, ``preprocess_dali``, ...)."""
    engines: tuple[str, ...] = ()
    """Of those, the models built as engines on a GPU (their platform and build stamp checked)."""
    shipped: tuple[ShippedModel, ...] = ()
    """Of those, the models that need more than their checked-in folder: their export, the check
    of their files, their cpu profile's replacement (:class:`harness.task_api.models.ShippedModel`)."""
    answer_suffix: str = ""
    """The twin of each pipeline's ensemble that also answers the task's stage taps when asked by
    name (``_taps``: ocr_dali_taps), so that the production model never makes them."""
    ensembles: tuple[tuple[str, str], ...] = ()
    """``(pipeline, ensemble)`` pairs naming an ensemble otherwise than ``<prefix>_<pipeline>`` (a
    deployment named by its user: :meth:`named`)."""

    def ensemble(self, pipeline: str) -> str:
        return dict(self.ensembles).get(pipeline, f"{self.prefix}_{pipeline}")

    def renamed(self, name: str, model: str) -> str:
        """The one naming rule of a deployment named ``name`` (``harness deploy --name``): the DALI
        ensemble clients call is ``name``, the model it ends in ``name_model``, every other model
        ``name_<its name here>`` (``name_preprocess_dali``, ``name_validate_image``, ...)."""
        if model == self.ensemble("dali"):
            return name
        return f"{name}_model" if model == self.model else f"{name}_{model}"

    def named(self, name: str, models: Sequence[str]) -> "TaskModels":
        """These models as a deployment named ``name`` writes ``models`` of them (:meth:`renamed`),
        reading the spec ``name.toml``: what the harness reads of that deployment."""
        kept = set(models)
        return dataclasses.replace(
            self, prefix=name, model=self.renamed(name, self.model), preprocess_prefix=f"{name}_", spec=f"{name}.toml",
            ensembles=(("dali", name),), added=tuple(self.renamed(name, m) for m in models),
            engines=tuple(self.renamed(name, m) for m in self.engines if m in kept),
            shipped=tuple(dataclasses.replace(m, name=self.renamed(name, m.name)) for m in self.shipped if m.name in kept))

    def answer(self, pipeline: str) -> str:
        """The model whose answer (with the task's extras) the harness reads for ``pipeline``."""
        return self.ensemble(pipeline) + self.answer_suffix

    def taps(self, pipeline: str) -> str:
        """The model returning every preprocessing stage of ``pipeline``."""
        return self.preprocess_prefix + PIPELINES[pipeline].taps_model

    def served(self, pipelines: Sequence[str] = tuple(PIPELINES)) -> tuple[str, ...]:
        """What a job reads of ``pipelines``: each one's ensemble (which loads its steps: the image
        guard, the preprocessing, the model, the postprocessing), the twin answering its stage taps
        and its taps model. A server started for a job loads only these (Triton's explicit model
        control: about 6 s to ready, where the whole repository's 36 models take 15-25 s)."""
        return tuple(dict.fromkeys(name for pipeline in pipelines
                                   for name in (self.ensemble(pipeline), self.answer(pipeline), self.taps(pipeline))))




class InferenceError(HarnessError, RuntimeError):
    """The server answered a request with an error (its message is kept)."""


class ServerUnavailable(HarnessError, RuntimeError):
    """The server did not answer at all: refused, reset, or timed out."""


class ServerOverloaded(ServerUnavailable):
    """The server refused the request as overloaded (a full queue, or a wait beyond the queue's
    timeout: the queue policy of its dynamic batchers): not the request's fault; worth retrying."""


# Triton's refusals by its queue policy (docs/robustness.md).
_OVERLOADED = ("exceeds maximum queue size", "request timeout expired")


# gRPC status codes meaning "no answer", as opposed to the server rejecting the request.
_UNAVAILABLE = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
# Answers about the server's state, not the request: a server shutting down or reloading
# unloads its models first; a Python-backend model whose process died answers "Stub process
# ... is not healthy" to every request after. Retried like no answer, never blamed on the image.
_NOT_SERVING = ("has no available versions", "is not ready", "server is stopping", "unknown model", "is not healthy")


@dataclass(frozen=True)
class TopK:
    """One class of a top-k answer."""

    index: int
    label: str
    score: float


def parse_classification(entries: np.ndarray) -> list[TopK]:
    """Triton's classification extension answers ``b"score:index:label"`` per class
    (``b"score:index"`` for an output without a label file: the index is the label)."""
    out = []
    for entry in entries:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        score, index, *label = text.split(":", 2)
        out.append(TopK(int(index), label[0] if label else index, float(score)))
    return out


class TritonClient:
    """A tritonclient (HTTP or gRPC) bound to one server URL (``host:port``)."""

    def __init__(self, url: str, protocol: str = "grpc", timeout: float = 60.0):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.url, self.protocol, self.timeout = url, protocol, timeout
        if protocol == "grpc":
            import tritonclient.grpc as module
            self._client = module.InferenceServerClient(url)
        else:
            import tritonclient.http as module
            self._client = module.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
        self._module = module
        from tritonclient.utils import InferenceServerException
        self._exception = InferenceServerException

    def close(self) -> None:
        self._client.close()

    @property
    def _deadline(self) -> dict:
        """A gRPC call's bound (HTTP's is the connection's timeout): a stalled server hangs no caller."""
        return {"client_timeout": self.timeout} if self.protocol == "grpc" else {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def is_ready(self, model: str | None = None) -> bool:
        try:
            return self._client.is_model_ready(model) if model else self._client.is_server_ready()
        except Exception:  # connection refused, timeouts: not ready
            return False

    def ready_models(self) -> list[str]:
        """Names of the models the server has ready ([] if it cannot say)."""
        try:
            index = self._client.get_model_repository_index()
        except Exception:  # informative only: the caller is already reporting a problem
            return []
        entries = index if isinstance(index, list) else [
            {"name": m.name, "state": m.state} for m in index.models]
        return sorted(e["name"] for e in entries if e.get("state") == "READY")

    def server_metadata(self) -> dict:
        """The server's name and version, or {} if it does not say (informative only)."""
        try:
            meta = self._client.get_server_metadata(**self._deadline)
        except Exception:  # an old or odd server: the report just lacks the version
            return {}
        return meta if isinstance(meta, dict) else {"version": meta.version, "name": meta.name}

    def model_config(self, model: str) -> dict:
        """The model's configuration as the server holds it (JSON field names), or {} if unknown."""
        try:
            config = self._client.get_model_config(model)
        except self._exception:
            return {}
        if self.protocol == "grpc":
            from google.protobuf.json_format import MessageToDict

            return MessageToDict(config.config, preserving_proto_field_name=True)
        return config

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str],
              class_count: int = 0) -> dict[str, np.ndarray]:
        """One request; raises :class:`InferenceError` with the server's message."""
        from tritonclient.utils import np_to_triton_dtype

        request_inputs = []
        for name, array in inputs.items():
            tensor = self._module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            request_inputs.append(tensor)
        kwargs = {"binary_data": True} if self.protocol == "http" else {}
        request_outputs = [self._module.InferRequestedOutput(name, class_count=class_count, **kwargs) for name in outputs]
        try:
            result = self._client.infer(model, request_inputs, outputs=request_outputs, **self._deadline)
        except self._exception as exc:
            message = exc.message() if hasattr(exc, "message") else str(exc)
            text = str(message).lower()
            if any(refusal in text for refusal in _OVERLOADED):
                raise ServerOverloaded(f"{self.url} ({self.protocol}): {message}") from None
            if "DEADLINE_EXCEEDED" in str(exc.status()) or "timed out" in text:
                raise ServerUnavailable(f"{self.url} ({self.protocol}): no answer within {self.timeout:g} s "
                                        f"(--timeout): {message}") from None
            if any(code in str(exc.status()) for code in _UNAVAILABLE) or any(state in text for state in _NOT_SERVING):
                raise ServerUnavailable(f"{self.url} ({self.protocol}): {message}") from None
            raise InferenceError(message) from None
        except TimeoutError as exc:  # HTTP: a socket timeout
            raise ServerUnavailable(f"{self.url} ({self.protocol}): no answer within {self.timeout:g} s (--timeout): "
                                    f"{exc}") from None
        except OSError as exc:  # HTTP: connection refused/reset
            raise ServerUnavailable(f"{self.url} ({self.protocol}): {type(exc).__name__}: {exc}") from None
        return {name: result.as_numpy(name) for name in outputs}

    def classify(self, images: Sequence[bytes], pipeline: str = "dali", top_k: int = 5) -> list[list[TopK]]:
        """Top-k classes of each image through the ``classify_<pipeline>`` ensemble."""
        out = self.infer(PIPELINES[pipeline].ensemble, {IMAGE: pack_images(images)}, [PROBABILITIES], class_count=top_k)
        return [parse_classification(row) for row in out[PROBABILITIES]]

    def top_k(self, model: str, inputs: dict[str, np.ndarray], output: str, k: int = 5) -> list[TopK]:
        """The top-k classes of one request's one image, from Triton's classification extension
        on any scores ``output`` (labels from the model's label file, if it has one)."""
        entries = self.infer(model, inputs, [output], class_count=k)[output]
        return parse_classification(entries.reshape(-1))

    def logits(self, images: Sequence[bytes], pipeline: str = "dali") -> np.ndarray:
        """[batch, classes] logits of the ``classify_<pipeline>`` ensemble."""
        return self.infer(PIPELINES[pipeline].ensemble, {IMAGE: pack_images(images)}, [LOGITS])[LOGITS]

    def stages(self, image: bytes, pipeline: str = "dali", stages: Sequence[str] = tuple(TAP_TENSORS),
               taps_model: str | None = None, extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
        """The deployed preprocessing stages of one image, read from the taps model (default
        the pipeline's; ``extra``: more of its outputs, kept under their tensor names)."""
        names = [TAP_TENSORS[s] for s in stages]
        out = self.infer(taps_model or PIPELINES[pipeline].taps_model, {IMAGE: pack_images([image])}, [*names, *extra])
        return {**{stage: out[name][0] for stage, name in zip(stages, names)}, **{name: out[name][0] for name in extra}}

    def deployed(self, image: bytes, pipeline: str = "dali") -> dict[str, np.ndarray]:
        """Everything the harness compares of one image: the preprocessing stages from the
        taps model, and ``output``, the logits of the production ensemble."""
        out = self.stages(image, pipeline)
        out["output"] = self.logits([image], pipeline)[0]
        return out

    def classifier_logits(self, model_input: np.ndarray) -> np.ndarray:
        """The deployed classifier alone on given [batch, 3, H, W] inputs."""
        return self.infer(CLASSIFIER, {"input": np.ascontiguousarray(model_input, np.float32)}, ["logits"])["logits"]
