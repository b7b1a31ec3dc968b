"""The deployed side a job is given: :class:`Deployment`, one base class with a few hooks.

A deployment knows which model serves the production answer, how an encoded file is sent
to it, which stages it exposes and how to read them; every method takes the client to use
(one per worker thread: see :class:`~harness.deployment.side.DeployedSide`). Kinds:

- :class:`~harness.deployment.taps.TapsDeployment`: this repository's ensembles, every
  preprocessing stage read from the taps model (the richest view);
- :class:`~harness.deployment.stepwise.StepwiseDeployment`: any ensemble, replayed step by
  step, each step output matched to a stage;
- :class:`~harness.deployment.stepwise.ModelDeployment`: a single model: its scores only.

A new kind (say, a client-side preprocessing function sending raw tensors) is one subclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from harness.deployment.discovery import IMAGE_KINDS, TensorInfo
from harness.packing import pack_images
from harness.scores import LOGITS, ScoreKind
from harness.stage import Stage
from harness.task_api import Task

if TYPE_CHECKING:
    from harness.client import TritonClient


class NotComparable(ValueError):
    """A deployed stage cannot run alone on the reference's previous stage (say, a step whose
    other inputs describe the deployment's own resize, fed a reference output of another size):
    said on that stage of the image, which is still compared."""


@dataclass(frozen=True)
class ImageRequest:
    """How encoded files go into a model: the input tensor, and whether requests are batched."""

    model: str
    tensor: TensorInfo
    batched: bool

    @property
    def kind(self) -> str:
        """``ragged uint8`` or ``bytes`` (:data:`~harness.deployment.discovery.IMAGE_KINDS`)."""
        return IMAGE_KINDS[self.tensor.data_type]

    @property
    def max_images(self) -> int | None:
        """Images one request may carry (None: as many as the server batches)."""
        return None if self.batched else 1

    def inputs(self, images: Sequence[bytes]) -> dict[str, np.ndarray]:
        """The request's inputs for ``images`` (one, unless batched)."""
        if not self.batched and len(images) != 1:
            raise ValueError(f"{self.model} is not batched: one image per request, got {len(images)}")
        array = (np.array([[bytes(b)] for b in images], dtype=np.object_) if self.kind == "bytes"
                 else pack_images(images))
        return {self.tensor.name: array if self.batched else array[0]}

    def describe(self) -> str:
        batching = "batched" if self.batched else "one image per request"
        return f"{self.tensor.describe()} ({self.kind}, {batching})"


class Deployment:
    """Base class; subclasses set the attributes and implement :meth:`read`."""

    model: str
    """The model whose answer is the production answer (an ensemble, usually)."""
    label: str
    """How reports name this side (the pipeline, or the model)."""
    request: ImageRequest
    scores_output: str
    scores_kind: ScoreKind = LOGITS
    """What the deployed output holds (logits, probabilities; an embedding), so what is compared."""
    _task: Task

    @property
    def task(self) -> Task:
        """The task the output serves (:mod:`harness.task_api`): what is compared after the
        model input; given by whoever opens the deployment (it knows the registry, this does not)."""
        return self._task

    def configure_task(self, spec, postprocess: str | None = None) -> "Task":
        """Bind the task to the job's spec (:meth:`harness.task.Task.configure`: a detector's
        postprocessing) and return it."""
        self._task = self.task.configure(spec, postprocess)
        return self._task

    box_outputs = None
    """The outputs holding the task's result when the deployment computes it (a detector's
    :class:`harness.detection.outputs.BoxOutputs`, :meth:`harness.task.Task.result_outputs`),
    read by name from its answer; None: the result is made here from ``output``."""
    extras: tuple[str, ...] = ()
    """Outputs of the answer read beside them (:attr:`harness.task.Task.answer_extras`: a
    detector's ``GEOMETRY``), those the model has."""
    raw_answered: bool = True
    """``scores_output`` is an output of :attr:`model` (else a tensor inside it: an ensemble
    answering only boxes, whose raw output is read from its steps)."""

    stages: tuple[Stage, ...] = ()
    """The stages :meth:`read` returns, in pipeline order (``output`` always)."""
    isolates: dict[Stage, Stage] = {}
    """Stage -> the reference stage that stage can be run alone on (:meth:`isolate`)."""

    def describe(self) -> list[str]:
        """What was found, one line each, for people (printed before a run, kept in reports)."""
        output = (f"{self.task.output_label} {self.scores_output} ({self.scores_kind.name})" if self.scores_output
                  else "no raw output")
        lines = [f"model {self.model}: image input {self.request.describe()}, {output}"]
        if self.box_outputs is not None:
            lines.append(f"result answered by {self.model}: {self.box_outputs.describe()}")
        return [*lines, f"stages exposed: {', '.join(self.stages)}"]

    def to_dict(self) -> dict:
        return {"kind": type(self).__name__, "model": self.model, "label": self.label,
                "image_input": self.request.describe(), "task": self.task.name, "scores": self.scores_output,
                "scores_kind": self.scores_kind.name,
                "stages": [str(s) for s in self.stages], "isolates": [str(s) for s in self.isolates],
                "found": self.describe()}

    def unsettled(self) -> list:
        """The tensors whose stage the evidence did not settle (listed, not compared), and the
        result outputs a probe's answer did not tell how to read (a box coding); a probe image
        that settles more is a better one."""
        results = [self.box_outputs] if getattr(self.box_outputs, "unsettled", False) else []
        return [m for m in getattr(self, "mappings", ()) if m.suggestion] + results

    # -- hooks ---------------------------------------------------------------------------
    def read(self, client: "TritonClient", data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        """Every exposed stage of one image (``output``: the production model's scores);
        ``image`` names it in what the deployment records about the run."""
        raise NotImplementedError

    def isolate(self, client: "TritonClient", stage: Stage, previous: np.ndarray) -> np.ndarray:
        """``stage`` of the deployment run alone on the reference's ``isolates[stage]``."""
        raise NotImplementedError(f"{type(self).__name__} cannot run {stage} alone")

    # -- shared --------------------------------------------------------------------------
    def answer(self, client: "TritonClient", data: bytes) -> dict[str, np.ndarray]:
        """One image's answer by output name, batch axis removed: the raw output (when the model
        answers it), the result outputs and the extras."""
        names = [*([self.scores_output] if self.scores_output and self.raw_answered else []),
                 *(self.box_outputs.names if self.box_outputs is not None else ()), *self.extras]
        got = client.infer(self.model, self.request.inputs([data]), names)
        return {name: value[0] if self.request.batched else value for name, value in got.items()}

    def answer_stages(self, answer: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The stages an answer (:meth:`answer`) holds: ``output`` in its own shape, the extras,
        the result (:meth:`harness.task.Task.read_answer`)."""
        out = {}
        if self.scores_output in answer:
            out[Stage.OUTPUT] = np.asarray(answer[self.scores_output], np.float32)
        out.update({name: np.asarray(answer[name]).reshape(-1) for name in self.extras if name in answer})
        if self.box_outputs is not None:
            out.update(self.task.read_answer(answer, self.box_outputs))
        return out

    def scores(self, client: "TritonClient", images: Sequence[bytes]) -> np.ndarray:
        """[images, classes] production scores; unbatched models get one request per image."""
        step = self.request.max_images or len(images)
        rows = [client.infer(self.model, self.request.inputs(images[i:i + step]), [self.scores_output])[self.scores_output]
                for i in range(0, len(images), step)]
        return np.concatenate([np.asarray(r, np.float32).reshape(-1 if self.request.batched else 1, r.shape[-1])
                               for r in rows])
