"""The stages compared, in pipeline order: one name for each, used everywhere a stage is named.

``Stage`` is a :class:`enum.StrEnum`: a member equals (and hashes as) its string value, so
``{"decode": ...}[Stage.DECODE]`` works and JSON writes ``"decode"``; the files the harness
writes (report.json, images.jsonl, per_image.csv) keep their plain stage names.
"""

from __future__ import annotations

import enum


class Stage(enum.StrEnum):
    DECODE = "decode"
    """HWC uint8 RGB, as decoded."""
    RESIZE = "resize"
    CROP = "crop"
    INPUT = "input"
    """The model input: normalized NCHW float32 (one image)."""
    OUTPUT = "output"
    """The raw model output, whatever its shape (a classifier's logits, an embedder's features)."""
    POSTPROCESS = "postprocess"
    """The task's result, computed from ``output`` by the task's postprocessing (an embedding
    task's normalized vector; a detection task's boxes): see :mod:`harness.task`."""
    TOPK = "topk"
    """Classification's postprocess stage, the predicted classes: it keeps the name its reports
    have always used."""

    @property
    def is_image(self) -> bool:
        """An HWC image on the 0-255 scale (gets PSNR); the others are tensors."""
        return self in IMAGE_STAGES

    @property
    def previous(self) -> "Stage | None":
        """The stage this one is computed from (None for ``decode``)."""
        index = STAGES.index(self)
        return STAGES[index - 1] if index else None


DEFAULT_TOP_K = 5
"""Classes the ``topk`` stage compares (top-k overlap) and accuracy scores (top-k accuracy), by default."""

STAGES: tuple[Stage, ...] = tuple(Stage)
"""Every compared stage, in pipeline order: the one place the order is written. Each library
(:mod:`harness.preprocessing.opencv`, :mod:`harness.preprocessing.dali_graph`, the reference
recipes) maps a stage to its step in a table, and :func:`harness.preprocessing.run_steps`
walks them in this order; the lists below are derived from it."""
PREPROCESS_STAGES: tuple[Stage, ...] = STAGES[:STAGES.index(Stage.INPUT) + 1]
"""The stages of preprocessing, from the file to the model input (what the taps models return)."""
TENSOR_STAGES: tuple[Stage, ...] = (*PREPROCESS_STAGES, Stage.OUTPUT)
"""The stages compared array by array (the task's result stage is derived from ``output``)."""
RESULT_STAGES: tuple[Stage, ...] = (Stage.POSTPROCESS, Stage.TOPK)
"""A task's result stage (:attr:`harness.task.Task.result_stage`): after ``output``, from it."""
IMAGE_STAGES: tuple[Stage, ...] = PREPROCESS_STAGES[:-1]
"""Image stages: HWC on the 0-255 scale (every preprocessing stage before the model input)."""
ISOLATED_INPUT: dict[Stage, Stage] = {stage: stage.previous for stage in PREPROCESS_STAGES[1:]}
"""Stage -> the reference stage it is fed when the deployed stage is run alone."""
TAP_TENSORS: dict[Stage, str] = {Stage.DECODE: "DECODED", Stage.RESIZE: "RESIZED", Stage.CROP: "CROPPED",
                                 Stage.INPUT: "INPUT"}
"""Preprocessing stage -> the output tensor of the taps models (``model_repository/*/config.pbtxt``
list them in this order). Here, beside the order, so that a new stage is declared in one place."""
GEOMETRY_TENSOR = "GEOMETRY"
"""A detector's preprocessing models also answer this INT32 [8] tensor: what the resize did
(:meth:`harness.geometry.Geometry.from_tensor`), so boxes map back to the source
image's pixels by what was actually applied. Stage dicts keep it under this name too."""
