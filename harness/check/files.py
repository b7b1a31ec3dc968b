"""What a check run streams to its report directory as images complete: images.jsonl (one
:class:`ImageResult` a line, what ``--resume`` reads back), per_image.csv, and with
``--save-tensors`` both sides' stage tensors (what ``harness compare`` reads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.check.image import ImageTensors
from harness.compare.result import ImageResult
from harness.stage import TENSOR_STAGES

RESULTS_FILENAME = "images.jsonl"
CSV_FILENAME = "per_image.csv"
VISUALS_DIRNAME = "visuals"
TENSORS_DIRNAME = "tensors"


CSV_STAGE_FIELDS = ("verdict", "max_abs", "mean_abs", "isolated_max_abs")


def csv_header(task=None) -> list[str]:
    """The columns: the image, its outcome, each tensor stage's, then the task's result stage's
    (:attr:`harness.task.Task.csv_fields`; default classification's ``topk`` columns)."""
    header = ["image", "status", "first_divergent_stage", "error"]
    for stage in TENSOR_STAGES:
        header += [f"{stage}_{f}" for f in CSV_STAGE_FIELDS]
    return header + list(_task(task).csv_fields)


def _task(task):
    from harness.task import get_task

    return task or get_task(None)


def csv_row(result: ImageResult, task=None) -> list:
    """``status`` is :attr:`ImageResult.outcome`: compared, failed, rejected by deployment/training."""
    task = _task(task)
    row = [result.image, result.outcome, result.first_divergent or "", result.error or ""]
    for stage in TENSOR_STAGES:
        s = result.stage(stage)
        if s is None:
            row += [""] * len(CSV_STAGE_FIELDS)
        elif s.metrics.get("shape_mismatch"):
            row += [s.verdict.value, "shape", "shape", (s.isolated or {}).get("max_abs", "")]
        else:
            row += [s.verdict.value, s.metrics["max_abs"], s.metrics["mean_abs"], (s.isolated or {}).get("max_abs", "")]
    return row + task.csv_values(result.stage(task.result_stage))


def save_image_tensors(path: Path, t: ImageTensors) -> None:
    arrays = {f"reference.{k}": v for k, v in t.reference.items()}
    arrays.update({f"deployed.{k}": v for k, v in t.deployed.items()})
    arrays.update({f"isolated.{k}": v for k, v in t.isolated.items()})
    np.savez_compressed(path, **arrays)


def load_image_tensors(path: Path) -> ImageTensors:
    t = ImageTensors()
    with np.load(path) as z:
        for key in z.files:
            side, _, stage = key.partition(".")
            getattr(t, side)[stage] = z[key]
    return t
