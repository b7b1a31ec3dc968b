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
    """The model's logits."""
    TOPK = "topk"
    """The predicted classes, derived from ``output``."""

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
"""Every compared stage, in pipeline order."""
PREPROCESS_STAGES: tuple[Stage, ...] = (Stage.DECODE, Stage.RESIZE, Stage.CROP, Stage.INPUT)
"""The stages of preprocessing (what the taps models return)."""
TENSOR_STAGES: tuple[Stage, ...] = (*PREPROCESS_STAGES, Stage.OUTPUT)
"""The stages compared array by array (``topk`` is derived from ``output``)."""
IMAGE_STAGES: tuple[Stage, ...] = (Stage.DECODE, Stage.RESIZE, Stage.CROP)
"""Image stages: HWC on the 0-255 scale."""
ISOLATED_INPUT: dict[Stage, Stage] = {Stage.RESIZE: Stage.DECODE, Stage.CROP: Stage.RESIZE, Stage.INPUT: Stage.CROP}
"""Stage -> the reference stage it is fed when the deployed stage is run alone."""
