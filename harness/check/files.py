"""What a check run streams to its report directory as images complete: images.jsonl (one
:class:`ImageResult` a line, what ``--resume`` reads back), per_image.csv, and with
``--save-tensors`` both sides' stage tensors (what ``harness compare`` reads), one
``tensors/<name>.<hash>.npz`` per image (:func:`tensors_path`), its name inside as ``image``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from harness.check.image import ImageTensors
from harness.files import write_atomic
from harness.names import bounded_filename, csv_text
from harness.result import ImageResult
from harness.stage import TENSOR_STAGES
from harness.task import get_task

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
    return task or get_task(None)


def csv_row(result: ImageResult, task=None) -> list:
    """``status`` is :attr:`ImageResult.outcome`: compared, failed, rejected by deployment/training,
    skipped. Text cells a spreadsheet could take for a formula start with ``'``
    (:func:`harness.names.csv_text`)."""
    task = _task(task)
    row = [csv_text(result.image), result.outcome.value, result.first_divergent or "", csv_text(result.error or "")]
    for stage in TENSOR_STAGES:
        s = result.stage(stage)
        if s is None:
            row += [""] * len(CSV_STAGE_FIELDS)
        elif s.metrics.get("shape_mismatch"):
            row += [s.verdict.value, "shape", "shape", (s.isolated or {}).get("max_abs", "")]
        else:
            row += [s.verdict.value, s.metrics["max_abs"], s.metrics["mean_abs"], (s.isolated or {}).get("max_abs", "")]
    return row + task.csv_values(result.stage(task.result_stage))


def tensors_path(directory: Path, image: str) -> Path:
    """Where ``--save-tensors`` keeps one image's tensors: a bounded, unique file name."""
    return directory / bounded_filename(image, ".npz")


def save_image_tensors(path: Path, t: ImageTensors, image: str | None = None) -> None:
    """Both sides' (and the isolated) stage tensors in one .npz, written atomically;
    ``image``, its name, is kept inside (key ``image``)."""
    arrays = {f"reference.{k}": v for k, v in t.reference.items()}
    arrays.update({f"deployed.{k}": v for k, v in t.deployed.items()})
    arrays.update({f"isolated.{k}": v for k, v in t.isolated.items()})
    if image is not None:
        arrays["image"] = np.array(image)
    write_npz(path, arrays)


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as a compressed .npz at ``path``, atomically: made in memory (a zip file that
    fails half-way, on a full disk, is never left open), then written and renamed."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_atomic(path, buf.getvalue())


def load_image_tensors(path: Path) -> ImageTensors:
    t = ImageTensors()
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            side, _, stage = key.partition(".")
            if side in ("reference", "deployed", "isolated"):
                getattr(t, side)[stage] = z[key]
    return t


def saved_image_name(path: Path) -> str:
    """The image a tensors file holds: its ``image`` key, or (an older run's file) its name."""
    with np.load(path, allow_pickle=False) as z:
        return str(z["image"]) if "image" in z.files else path.name.removesuffix(".npz")
