"""How an OCR deployment's outputs are read, whatever their names (no server): its texts by type
and shape, its words' scores told from its boxes', its boxes' coding (corners, x/y/width/height)
told by a probe's answer; ``--output`` names the texts where two outputs could be."""

from __future__ import annotations

import numpy as np
import pytest

from harness.deployment.discovery import DeploymentError, ModelInfo, TensorInfo, task_output
from harness.detection.outputs import AXIS_ALIGNED, UNSCORED, BoxOutputs
from harness.stage import Stage
from harness.task import TASKS
from harness.task.ocr import WordOutputs

FP32, STRING = "TYPE_FP32", "TYPE_STRING"


def model(*outputs):
    return ModelInfo("reader", "python", 0, (TensorInfo("image_bytes", STRING, (1,)),),
                     tuple(TensorInfo(n, t, d) for n, t, d in outputs))


def test_texts_under_any_name_and_one_score_per_word_read_as_the_words():
    rapidocr = model(("boxes", FP32, (-1, 4, 2)), ("scores", FP32, (-1,)), ("texts", STRING, (-1,)))
    task, out, why = task_output(rapidocr, tasks=TASKS)
    assert (task.name, out) == ("ocr", None) and "texts texts" in why
    assert task.result_outputs(rapidocr) == WordOutputs(BoxOutputs("boxes", None, "quads"), "texts", "scores")
    paddle = model(("dt_polys", FP32, (-1, 4, 2)), ("dt_scores", FP32, (-1,)), ("rec_texts", STRING, (-1,)),
                   ("rec_scores", FP32, (-1,)))
    assert task.result_outputs(paddle) == WordOutputs(BoxOutputs("dt_polys", "dt_scores", "quads"), "rec_texts",
                                                      "rec_scores")
    ours = model(("BOXES", FP32, (-1, 4, 2)), ("SCORES", FP32, (-1,)), ("TEXTS", STRING, (-1,)),
                 ("TEXT_SCORES", FP32, (-1,)), ("PROBABILITY", FP32, (1, -1, -1)), ("GEOMETRY", "TYPE_INT32", (8,)),
                 ("WORD_INPUTS", FP32, (-1, 3, 48, -1)))
    task, out, _ = task_output(ours, tasks=TASKS)
    assert out.name == "PROBABILITY"
    assert task.result_outputs(ours) == WordOutputs(BoxOutputs("BOXES", "SCORES", "quads"), "TEXTS", "TEXT_SCORES")


def test_output_names_the_texts_where_two_outputs_could_be():
    two = model(("regions", FP32, (-1, 4)), ("a", STRING, (-1,)), ("b", STRING, (-1,)))
    with pytest.raises(DeploymentError, match="2 outputs that could hold its texts.*--output"):
        task_output(two, "ocr", tasks=TASKS)
    task, out, _ = task_output(two, "ocr", "b", tasks=TASKS)
    assert out is None and task.result_outputs(two, "b").texts == "b"
    # of two, the one named like texts
    assert TASKS["ocr"].result_outputs(model(("boxes", FP32, (-1, 4)), ("lang", STRING, (-1,)),
                                             ("words", STRING, (-1,)))).texts == "words"


def test_x_y_width_height_told_from_corners_by_the_probe_and_compared_as_enclosing_boxes():
    boxes = BoxOutputs("regions", None, "xyxy")
    corners = {"regions": np.array([[10, 20, 60, 40], [200, 100, 260, 130]], np.float32)}
    widths = {"regions": np.array([[10, 20, 50, 20], [200, 100, 60, 30]], np.float32)}
    assert boxes.settled(widths, (300, 400)).layout == "xywh"
    assert boxes.settled(corners, (300, 400)).layout == "xyxy"  # as x, y, w, h the second would leave the image
    undecided = boxes.settled({"regions": widths["regions"][:1]}, (300, 400))
    assert "fit x, y, width, height as well" in undecided.why and undecided.unsettled  # the next probe image may tell
    assert WordOutputs(boxes.settled({"regions": np.zeros((0, 4))}, (300, 400)), "words").unsettled
    named = TASKS["ocr"].result_outputs(model(("bbox_xywh", FP32, (-1, 4)), ("words", STRING, (-1,))))
    assert named.boxes.layout == "xywh" and named.boxes.settled(corners, (300, 400)).layout == "xywh"
    words = WordOutputs(boxes.settled(widths, (300, 400)), "words", None)
    answer = {**widths, "words": np.array([b"cafe", b"open"], dtype=object)}
    stages = TASKS["ocr"].read_answer(answer, words)
    assert stages[UNSCORED].all() and stages[AXIS_ALIGNED].all() and list(stages["TEXTS"]) == ["cafe", "open"]
    np.testing.assert_array_equal(stages[Stage.POSTPROCESS][1, :8], [200, 100, 260, 100, 260, 130, 200, 130])
    with pytest.raises(ValueError, match="1 texts in words for 2 boxes"):
        TASKS["ocr"].read_answer({**answer, "words": answer["words"][:1]}, words)
    # a reference's tilted box is compared as its enclosing box where the deployment's coding holds no rotation
    from harness.task.detection import as_deployed_codes

    tilted = np.array([[0, 10, 40, 0, 45, 20, 5, 30, 0.9, np.nan]])
    np.testing.assert_array_equal(as_deployed_codes(tilted, stages)[0, :8], [0, 0, 45, 0, 45, 30, 0, 30])
    np.testing.assert_array_equal(as_deployed_codes(tilted, {}), tilted)
