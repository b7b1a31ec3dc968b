"""Real result objects from real small arrays, for the server-free tests of compare/, the run
model and the report writers: each image's stages are made here and compared by the same
:func:`harness.compare.stages.compare_stages` a check runs."""

from __future__ import annotations

import numpy as np

from harness.compare.aggregate import RunSummary
from harness.compare.stages import compare_stages
from harness.compare.tolerance import DEFAULT_TOLERANCES
from harness.result import ImageResult
from harness.results import CheckReport, CheckRun, DeployedInfo, ReferenceInfo, ServerInfo, SpecInfo
from harness.stage import Stage
from harness.tolerance import Tolerance

TOLERANCES = {**DEFAULT_TOLERANCES, Stage.INPUT: Tolerance(atol=0.01)}
TOP_K = 3
CLASSES = 10


def stages(seed: int, margin: float = 0.2) -> dict[Stage, np.ndarray]:
    """A small reference image's every stage: decode 12x8, resize 8x8, crop 6x6, input 3x6x6, logits
    of 10 classes (class 0 first, ``margin`` logits ahead of class 1)."""
    rng = np.random.default_rng(seed)
    decode = rng.integers(0, 256, (12, 8, 3), dtype=np.uint8)
    resize = decode[::3, :, :][:, :8].repeat(2, axis=0)[:8]
    crop = resize[1:7, 1:7]
    model_input = (crop.transpose(2, 0, 1).astype(np.float32) - 127.0) / 128.0
    logits = np.array([4.0, 4.0 - margin, *np.linspace(2.0, -4.0, CLASSES - 2)], np.float32)
    return {Stage.DECODE: decode, Stage.RESIZE: resize, Stage.CROP: crop, Stage.INPUT: model_input, Stage.OUTPUT: logits}


def deployed_like(reference: dict[Stage, np.ndarray], *, resize_error: int = 0, logit_swap: float | None = None,
                  other_shape: bool = False) -> dict[Stage, np.ndarray]:
    """The deployed side of ``reference``: equal, or with ``resize_error`` levels added to one
    resized pixel (and what follows from it), the two best logits swapped so that the new
    top-1 is ``logit_swap`` ahead (a tie when the reference's margin is at most 0.5), or a
    resize of another shape."""
    dep = {k: v.copy() for k, v in reference.items()}
    if resize_error:
        dep[Stage.RESIZE][2, 2] = np.clip(dep[Stage.RESIZE][2, 2].astype(int) + resize_error, 0, 255)
        dep[Stage.CROP] = dep[Stage.RESIZE][1:7, 1:7]
        dep[Stage.INPUT] = (dep[Stage.CROP].transpose(2, 0, 1).astype(np.float32) - 127.0) / 128.0
        dep[Stage.OUTPUT] = dep[Stage.OUTPUT] + np.float32(0.01)
    if logit_swap is not None:
        out = dep[Stage.OUTPUT]
        first, second = np.argsort(-out)[:2]
        out[second] = out[first] + np.float32(logit_swap)
    if other_shape:
        dep[Stage.RESIZE] = dep[Stage.RESIZE][:7]
    return dep


def result(name: str, seed: int = 0, margin: float = 0.2, **deployed) -> ImageResult:
    """One image's :class:`ImageResult`, isolated stages included (the deployed stage fed the
    reference's previous one is equal here: every error is inherited but the one made)."""
    reference = stages(seed, margin)
    dep = deployed_like(reference, **deployed)
    isolated = {Stage.RESIZE: dep[Stage.RESIZE], Stage.CROP: reference[Stage.CROP],
                Stage.INPUT: reference[Stage.INPUT], Stage.OUTPUT: reference[Stage.OUTPUT]}
    return ImageResult(name, compare_stages(reference, dep, TOLERANCES, isolated, TOP_K, tie_margin=0.5))


def summary(*results: ImageResult):
    run = RunSummary()
    for r in results:
        run.add(r)
    return run.result()


def check_report(*results: ImageResult, stopped: str | None = None, fail_on: str = "diverged") -> CheckReport:
    return CheckReport(
        summary=summary(*results), spec=SpecInfo("spec.toml", TOLERANCES), versions={"numpy": np.__version__},
        reference=ReferenceInfo("opencv: cv2.resize", "onnxruntime (model.onnx)"),
        deployed=DeployedInfo("classify_dali", "preprocess_dali_taps", "dali", ServerInfo("127.0.0.1:8001", "grpc")),
        run=CheckRun(1.5, 0.5, fail_on, top_k=TOP_K, stopped_reason=stopped))
