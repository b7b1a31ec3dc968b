"""This repository's own ensembles: every preprocessing stage from the taps model.

The DALI backend cannot return a stage that no later operator consumes from the production
model, so the repository serves the same graph a second time returning every stage
(``preprocess_dali_taps``); the OpenCV model returns the stages asked for. The output is
the production ensemble's own. Isolation runs the same library's stage code in-process on
the reference's previous stage (the DALI graph pieces on the CPU, or the OpenCV functions),
and the classifier on the reference's model input through the server.
"""

from __future__ import annotations

import threading

import numpy as np

from harness.client import IMAGE, PIPELINES, Pipeline, TaskModels, TritonClient
from harness.deployed import stage_runner
from harness.deployment.base import Deployment, ImageRequest
from harness.deployment.discovery import TensorInfo
from harness.packing import pack_images
from harness.spec import Preprocess
from harness.stage import GEOMETRY_TENSOR, ISOLATED_INPUT, TENSOR_STAGES, Stage
from harness.task_api import Task


class TapsDeployment(Deployment):
    """``--pipeline dali|opencv``: the production ensemble and its taps model."""

    stages = TENSOR_STAGES
    isolates = {**ISOLATED_INPUT, Stage.OUTPUT: Stage.INPUT}

    def __init__(self, pipeline: str, task: Task, preprocess: Preprocess | None = None, models: TaskModels | None = None):
        """``task``: which of the repository's ensembles of this pipeline (its
        :attr:`~harness.task_api.Task.repository`: classification's ``classify_<pipeline>``;
        ``models``, where given: a deployment's own names of them, :meth:`TaskModels.named`);
        ``preprocess``: the deployed spec, which the in-process isolation runners read (None:
        only the model can run alone)."""
        self.pipeline: Pipeline = PIPELINES[pipeline]
        self._task = task
        self.models = models or task.repository
        self.model, self.label, self.taps_model = self.models.ensemble(pipeline), pipeline, self.models.taps(pipeline)
        self.request = ImageRequest(self.model, TensorInfo(IMAGE, "TYPE_UINT8", (-1,)), batched=True)
        self.scores_output = self.models.ensemble_output
        self.scores_kind = self.task.output_kind(self.scores_output, np.zeros(1, np.float32))
        self.preprocess = preprocess
        self._local = threading.local()
        self.box_outputs = None
        if self.models.results:  # the server postprocesses (a detector's boxes): read them, run it alone too
            self.box_outputs = self.task.served_results(self.models.results)
            self.stages = (*TENSOR_STAGES, Stage.POSTPROCESS)
            self.isolates = {**self.isolates, Stage.POSTPROCESS: (Stage.OUTPUT, GEOMETRY_TENSOR)}

    def describe(self) -> list[str]:
        return [*super().describe(), f"stages read from the taps model {self.taps_model}; isolation in-process "
                                     f"({self.pipeline.name}) and through {self.models.model}"]

    def read(self, client: TritonClient, data: bytes, image: str = "") -> dict[Stage, np.ndarray]:
        out = client.stages(data, self.pipeline.name, taps_model=self.taps_model)
        names = [self.scores_output, *((*self.box_outputs.names, *self.task.answer_extras) if self.box_outputs else ())]
        answer = {k: v[0] for k, v in client.infer(self.models.answer(self.pipeline.name), {IMAGE: pack_images([data])},
                                                   names).items()}
        out[Stage.OUTPUT] = answer[self.scores_output]
        if self.box_outputs:
            out.update(self.task.read_answer(answer, self.box_outputs))
        return out

    def isolate(self, client: TritonClient, stage: Stage, previous) -> np.ndarray:
        if stage is Stage.POSTPROCESS:  # the server's postprocessing step on the reference's output and geometry
            m, boxes = self.models, self.box_outputs
            inputs = {m.ensemble_output: np.ascontiguousarray(previous[Stage.OUTPUT][None], np.float32),
                      GEOMETRY_TENSOR: np.ascontiguousarray(previous[GEOMETRY_TENSOR][None], np.int32)}
            answer = {k: v[0] for k, v in client.infer(m.postprocess_model, inputs, list(boxes.names)).items()}
            return self.task.read_answer(answer, boxes)[Stage.POSTPROCESS]
        if stage is Stage.OUTPUT:
            m = self.models
            return client.infer(m.model, {m.model_input: np.ascontiguousarray(previous[None], np.float32)},
                                [m.model_output])[m.model_output][0]
        if self.preprocess is None:
            raise ValueError(f"{self.label}: no deployed spec given, so {stage} cannot run alone")
        if getattr(self._local, "runner", None) is None:  # DALI pipelines are not thread-safe: one per thread
            self._local.runner = stage_runner(self.pipeline.name, self.preprocess)
        return self._local.runner.run(stage, previous)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "taps_model": self.taps_model, "pipeline": self.pipeline.name}
