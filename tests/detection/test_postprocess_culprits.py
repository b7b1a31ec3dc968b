"""diagnose's postprocessing culprits without a server (issue 34): the reference's postprocessing
run with each candidate of its ``[postprocess]`` table on the reference's raw output, judged
against the deployment's boxes, on a YOLO head built from the labeled boxes of real photos
whose duplicates overlap their word by IoU 0.67: NMS at IoU 0.45 (the reference's) keeps one
box a word, at 0.7 (the deployment's) two."""

from __future__ import annotations

import numpy as np

from harness.detection.effect import load_labels
from harness.detection.postprocess import from_table
from harness.geometry import Letterbox, letterbox_geometry
from harness.spec import parse_spec
from harness.stage import GEOMETRY_TENSOR, Stage
from harness.task.detection import Detection, DetectionSetup, postprocess_hypotheses
from harness.verdict import Verdict

REFERENCE = {"name": "yolo", "layout": "v8", "iou_threshold": 0.45}
DEPLOYED = {**REFERENCE, "iou_threshold": 0.7}


def overlapping_head(xyxy: np.ndarray) -> np.ndarray:
    """A v8 head [4 + 1, N]: each box (score 0.9) and a copy shifted right by a fifth of its
    width (score 0.8: IoU 0.8 / 1.2 = 0.67 with it)."""
    rows = []
    for x1, y1, x2, y2 in xyxy:
        for shift, score in ((0.0, 0.9), (0.2 * (x2 - x1), 0.8)):
            rows.append([(x1 + x2) / 2 + shift, (y1 + y2) / 2, x2 - x1, y2 - y1, score])
    return np.array(rows, np.float32).T


def test_the_nms_iou_threshold_is_found_among_the_postprocessing_culprits(labeled):
    labels = load_labels(labeled)
    name, truth = next((n, t) for n, t in labels.boxes.items() if len(t) >= 2)
    image = next(im for im in labels.coco["images"] if im["file_name"] == name)
    source = (image["height"], image["width"])
    spec = parse_spec({"resize": {"mode": "letterbox", "size": [640, 640]}, "postprocess": REFERENCE})
    geometry = spec.preprocess.resize.geometry(*source)
    assert geometry == letterbox_geometry(*source, Letterbox((640, 640)))
    head = overlapping_head(geometry.to_input(truth.xyxy.reshape(-1, 2, 2)).reshape(-1, 4))
    deployed_boxes = from_table(DEPLOYED)({"output0": head}, geometry)
    assert len(deployed_boxes) == 2 * len(truth) == 2 * len(from_table(REFERENCE)({"output0": head}, geometry))

    task = Detection(DetectionSetup(from_table(REFERENCE), None, spec.preprocess.resize, spec.preprocess.resize,
                                    reference_table=REFERENCE, deployed_table=None))
    hypotheses = {h.name: h for h in task.diagnose_hypotheses()}
    assert {h.culprit for h in hypotheses.values()} >= {"NMS IoU threshold", "confidence threshold",
                                                         "class-agnostic NMS", "NMS implementation"}
    right = hypotheses["iou threshold 0.7"]
    assert right.changes == (("iou_threshold", 0.45, 0.7),)
    from harness.diagnose.catalogue import Hypothesis

    as_diagnose_tries_it = Hypothesis(right.name, right.culprit, postprocess=right.changes)
    assert as_diagnose_tries_it.changes(spec.preprocess) == [("postprocess.iou_threshold", 0.45, 0.7)]

    def judged(changes):
        context = {"deployed": {Stage.POSTPROCESS: deployed_boxes.to_array(), Stage.OUTPUT: head,
                                GEOMETRY_TENSOR: geometry.to_tensor()},
                   "source": source, "preprocess": spec.preprocess, "postprocess": changes}
        return task.diagnose_result(head, head, None, 0, 0.05, context)

    assert judged({}) == (Verdict.DIVERGED, 1.0)  # a second box a word, nowhere near the score threshold
    verdict, error = judged({"iou_threshold": 0.7})
    assert verdict is Verdict.CLOSE and error == 0.0
    assert judged({"iou_threshold": 0.6})[0] is Verdict.DIVERGED  # 0.67 > 0.6: still one box a word
    # the deployed spec's value is offered too, and a table that changes several keys as one
    listed = postprocess_hypotheses(REFERENCE, {**DEPLOYED, "iou_threshold": 0.72, "conf_threshold": 0.3})
    names = [h.name for h in listed]
    assert "iou threshold 0.72" in names and names[-1] == "the deployed spec's postprocessing"
    assert postprocess_hypotheses(None) == [] and postprocess_hypotheses({"name": "db"})[0].culprit.startswith("DB")
