"""Where a diverged stage's error usually comes from: one sentence per stage, the ``why`` of a
:class:`~harness.results.StageStats` in every report."""

from __future__ import annotations

from harness import operations
from harness.operations import resize_filter, resize_mode
from harness.stage import Stage
from harness.verdict import Verdict

STAGE_HINTS = {
    Stage.DECODE: f"JPEG decoding: {operations.hint(Stage.DECODE)}",
    Stage.RESIZE: f"resize: {operations.hint(Stage.RESIZE)}",
    Stage.CROP: f"crop: {operations.hint(Stage.CROP)}, a letterbox's padding "
                f"({resize_mode.PADDING_WORDS}), or a different resize mode upstream",
    Stage.INPUT: f"normalization: {operations.hint(Stage.INPUT)}",
    Stage.OUTPUT: "the model itself: precision (TensorRT fp16), runtime, or a different model file",
    Stage.POSTPROCESS: "the task's result follows from the output; where the postprocessing alone diverges, the "
                       "deployment postprocesses differently (another normalization, thresholds, NMS, boxes mapped "
                       "back with the wrong scale or padding, a different postprocessing step)",
    Stage.TOPK: "prediction changes follow from the earlier stages",
}


def explain(stage: Stage, verdict: Verdict, isolated_verdict: Verdict | None) -> str | None:
    """One sentence on where a diverged stage's error comes from, from its isolated run
    (None unless ``verdict`` is diverged)."""
    if verdict is not Verdict.DIVERGED:
        return None
    if isolated_verdict is Verdict.DIVERGED:
        where = "this stage adds the error by itself (it diverges even when fed the reference's previous stage)"
    elif isolated_verdict in (Verdict.EQUAL, Verdict.CLOSE):
        where = (f"this stage alone is {isolated_verdict.value} when fed the reference's previous stage: it inherits "
                 "the error from earlier stages")
    else:
        where = "no isolated run for this stage"
    hint = STAGE_HINTS.get(stage, "")
    if stage == Stage.INPUT and isolated_verdict is not Verdict.DIVERGED:
        # The normalization alone agrees (or cannot run alone): the image reached it already moved.
        hint = INPUT_INHERITED if isolated_verdict else f"{hint}; or, before it, {INPUT_INHERITED}"
    why = f"{where}. Usual causes: {hint}."
    if stage == Stage.OUTPUT and isolated_verdict is Verdict.DIVERGED:
        # The classifier alone diverges on the reference's input: look inside the model.
        why += f" {LAYERS_HINT}"
    return why


INPUT_INHERITED = (f"the image that reached the normalization: the resize ({resize_filter.OPERATION.hint}, rounding, a "
                   "detector's limit type and length: resize.*) or a letterbox's placement (where the padding goes, "
                   f"its grey, its rounding: {resize_mode.PAD_POSITION.path}, pad_value, pad_rounding, auto)")
"""The input stage's causes when its normalization alone agrees, or where no earlier stage is
shown (a deployment whose own step answers the model input: the letterbox is inside it)."""

LAYERS_HINT = ("The classifier alone diverges: find its first divergent layer with `harness layers IMAGES --executions "
               "torch,onnx` (the export) and `harness layers IMAGES --executions onnx,onnx-fp16` (precision); "
               "`harness model export --fp16 "
               "--calibration IMAGES` keeps the layers that break fp16 in fp32.")
