"""What a model on the server is, read from the server itself: its config and metadata
(``get_model_config``, ``get_model_metadata``; HTTP and gRPC give the same fields), turned
into small frozen objects the harness can act on.

- :class:`TensorInfo`: one input or output (name, Triton data type, dims without the batch);
- :class:`ModelInfo`: one model (batching, inputs, outputs, and an ensemble's steps);
- :func:`image_input`: the input an encoded file goes into, and how it is sent;
- :func:`scores_output`: the output holding the class scores.

Anything the harness cannot use is refused with a :class:`DeploymentError` that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from harness.errors import UsageError
from harness.task_api import Task, claim

if TYPE_CHECKING:
    from harness.client import TritonClient


class DeploymentError(UsageError):
    """The deployment named cannot be checked as it is (a model that does not exist, an input
    that is not an encoded image, no output of class scores, ...)."""


class ProbeRejected(DeploymentError):
    """The deployment (or the client's preprocessing) rejected the probe image: another image may do."""


IMAGE_KINDS = {"TYPE_UINT8": "ragged uint8", "TYPE_STRING": "bytes"}
"""Triton data type of an encoded-image input -> how a file is sent: ``ragged uint8`` (DALI's
convention: the file's bytes, zero padded to the longest of the batch) or ``bytes`` (one
object per image, as Triton's image_client and most Python preprocessors take it)."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a model's signature: ``dims`` without the batch dimension."""

    name: str
    data_type: str
    """Triton's name, e.g. ``TYPE_FP32``."""
    dims: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.name} {self.data_type.removeprefix('TYPE_')} {list(self.dims)}"


@dataclass(frozen=True)
class Step:
    """One step of an ensemble: the model it runs and how its tensors connect, each map
    from the step model's tensor name to the ensemble's."""

    model: str
    inputs: dict[str, str]
    outputs: dict[str, str]


@dataclass(frozen=True)
class ModelInfo:
    """A model as the server holds it."""

    name: str
    platform: str
    """``ensemble``, ``python``, ``dali``, ``onnxruntime_onnx``, ``tensorrt_plan``, ..."""
    max_batch_size: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    steps: tuple[Step, ...] = ()
    stateful: bool = False
    """The model uses the sequence batcher: its answers depend on earlier requests."""
    labelled: tuple[str, ...] = ()
    """The outputs with a label file (``label_filename``): class scores, for discovery's task."""

    @property
    def batched(self) -> bool:
        """Requests carry a leading batch dimension (``max_batch_size`` > 0)."""
        return self.max_batch_size > 0

    @property
    def is_ensemble(self) -> bool:
        return self.platform == "ensemble"

    def output(self, name: str) -> TensorInfo:
        return next(t for t in self.outputs if t.name == name)

    def input(self, name: str) -> TensorInfo:
        return next(t for t in self.inputs if t.name == name)


def read_model(client: "TritonClient", name: str) -> ModelInfo:
    """``name``'s config from the server; :class:`DeploymentError` if the server does not
    have it ready (the message lists the models it does have)."""
    if not client.is_ready(name):
        available = client.ready_models()
        raise DeploymentError(f"model {name!r} is not ready on {client.url}"
                              + (f"; ready models: {', '.join(available)}" if available else ""))
    config = client.model_config(name)
    if not config:
        raise DeploymentError(f"{client.url} gives no configuration for model {name!r}")
    try:
        return parse_config(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise DeploymentError(f"cannot read the configuration {client.url} gives for model {name!r}: "
                              f"{type(exc).__name__}: {exc}") from None


def parse_config(config: dict) -> ModelInfo:
    """A model config as tritonclient returns it (JSON field names; gRPC's int64 dims as
    strings and default values left out) -> :class:`ModelInfo`."""

    def tensors(key: str) -> tuple[TensorInfo, ...]:
        return tuple(TensorInfo(t["name"], t.get("data_type", "TYPE_INVALID"),
                                tuple(int(d) for d in t.get("reshape", {}).get("shape", t.get("dims", ()))))
                     for t in config.get(key, ()))

    # Protobuf maps have no order (it varies between client processes): sort by tensor name so
    # that every run, and every shard of one, maps and reports the steps' tensors alike.
    steps = tuple(Step(s["model_name"], dict(sorted(s.get("input_map", {}).items())),
                       dict(sorted(s.get("output_map", {}).items())))
                  for s in config.get("ensemble_scheduling", {}).get("step", ()))
    platform = config.get("platform") or config.get("backend") or "unknown"
    return ModelInfo(config.get("name", "?"), platform, int(config.get("max_batch_size", 0) or 0),
                     tensors("input"), tensors("output"), steps, "sequence_batching" in config,
                     tuple(t["name"] for t in config.get("output", ()) if t.get("label_filename")))


def image_input(model: ModelInfo) -> TensorInfo:
    """The input an encoded image file goes into: ``TYPE_UINT8`` dims ``[-1]`` (ragged bytes)
    or ``TYPE_STRING`` dims ``[1]`` (one object); the model must have exactly one input and
    answer each request on its own (no sequence batching)."""
    if model.stateful:
        raise DeploymentError(f"model {model.name!r} uses the sequence batcher (its answer depends on earlier "
                              "requests of a sequence): the harness checks models that answer each image alone")
    if len(model.inputs) != 1:
        names = ", ".join(t.describe() for t in model.inputs)
        raise DeploymentError(f"model {model.name!r} takes {len(model.inputs)} inputs ({names}); the harness sends "
                              "one encoded image file to a model with one input")
    tensor = model.inputs[0]
    kind = IMAGE_KINDS.get(tensor.data_type)
    ok_dims = {"ragged uint8": ((-1,),), "bytes": ((1,), (-1,))}.get(kind, ())
    if kind is None or tensor.dims not in ok_dims:
        raise DeploymentError(
            f"model {model.name!r} takes {tensor.describe()}, not an encoded image: the harness sends a file as "
            "UINT8 [-1] (raw bytes, DALI's convention) or BYTES [1] (one object per image)")
    return tensor


def task_output(model: ModelInfo, task: str | None = None, choice: str | None = None, *,
                tasks: Mapping[str, Task]) -> tuple[Task, TensorInfo | None, str]:
    """(the task, the output it reads, why that task) of ``model``, among ``tasks`` (the
    registry, given by the caller: :data:`harness.task.TASKS`): ``task`` as ``--task`` names
    it, or (None) the one the model's outputs show signs of (:func:`harness.task_api.claim`);
    ``choice``: ``--output``. The output is None when the model answers only the task's result
    (a detector's boxes: :meth:`harness.task.Task.result_outputs`), whose raw output, if any,
    is found elsewhere (an ensemble's step). Refuses, in one line saying why, a model with no
    output the task can read, and a task named for an output that is plainly another task's
    (unless ``--output`` names it)."""
    chosen, why = (tasks[task], f"--task {task}") if task is not None else claim(model, list(tasks.values()))
    pick = chosen.choose_output(model, choice)
    results = chosen.result_outputs(model, choice)
    if pick.name is None and (results is None or (choice is not None and choice not in results.names)):
        others = [t.name for t in tasks.values() if t is not chosen and t.claims(model)]
        hint = f" (it looks like {others[0]}: --task {others[0]})" if others else ""
        raise DeploymentError(pick.why + hint)
    if pick.name is None:
        return chosen, None, why
    tensor = model.output(pick.name)
    if (task is not None and choice is None and not chosen.signs(tensor, tensor.name in model.labelled)
            and not (chosen.claims_first and chosen.claims(model))):
        for other in tasks.values():
            sign = other.signs(tensor, tensor.name in model.labelled) if other is not chosen else None
            if sign:
                raise DeploymentError(
                    f"--task {task}: {model.name} answers {other.noun}, not {chosen.noun}: {sign} ({tensor.describe()}); "
                    f"use --task {other.name}, or --output NAME for an output that holds {chosen.noun}")
    return chosen, tensor, why


def scores_output(model: ModelInfo, choice: str | None = None, prefer: str = "logit") -> TensorInfo:
    """The output of class scores: ``choice`` if given, else the one FP32 output of one
    dimension (``[classes]``; ``[1, classes]`` unbatched); of several, the one whose name
    holds ``prefer`` (default: logits, what the reference model gives), else the first."""
    candidates = [t for t in model.outputs if t.data_type in ("TYPE_FP32", "TYPE_FP16")
                  and len([d for d in t.dims if d != 1]) == 1 and max(t.dims) > 1]
    if choice is not None:
        named = [t for t in model.outputs if t.name == choice]
        if not named:
            raise DeploymentError(f"model {model.name!r} has no output {choice!r}; "
                                  f"outputs: {', '.join(t.describe() for t in model.outputs)}")
        if named[0] not in candidates:
            raise DeploymentError(f"output {named[0].describe()} of {model.name!r} is not class scores "
                                  "(one FP32 dimension of classes)")
        return named[0]
    if not candidates:
        raise DeploymentError(f"model {model.name!r} has no output of class scores (one FP32 [classes] tensor); "
                              f"outputs: {', '.join(t.describe() for t in model.outputs) or 'none'}")
    preferred = [t for t in candidates if prefer in t.name.lower()]
    return (preferred or candidates)[0]


def numpy_dtype(data_type: str):
    """A Triton data type (``TYPE_FP32``) as numpy's."""
    import numpy as np
    from tritonclient.utils import triton_to_np_dtype

    name = data_type.removeprefix("TYPE_")
    return np.dtype(triton_to_np_dtype("BYTES" if name == "STRING" else name))


def classes_of(tensor: TensorInfo) -> int:
    """The class count of a scores output."""
    return max(tensor.dims)
