"""DB boxes of one probability map, mapped back through the letterbox: the words' rotated
rectangles (``harness.detection.db.db_boxes`` in the map's own pixels), the axis-aligned box
enclosing each, then ``(x - pad) / r`` and clipped to the source image, as YOLO-style code
scales boxes back (``letterbox`` is r, the padding left and top, the source width and height).
Out: ``boxes`` FP32 [N, 4] (x1, y1, x2, y2) and ``scores`` FP32 [N].

Parameters (config.pbtxt): ``thresh``, ``box_thresh``, ``unclip_ratio`` (DB's, rapidocr's
defaults); ``unpad`` (``true``; ``false`` is the port bug of a box mapped back by the scale
alone, the padding ignored). ``fault`` plants a broken answer for the harness's tests
(empty: none): ``outside`` moves every box beyond the image's right edge, ``nan`` makes the
scores NaN, ``many`` adds 3000 small boxes on a grid.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.detection.db import db_boxes
from harness.geometry import Geometry
from harness.postprocessing import DbParams

FAULTS = ("", "outside", "nan", "many")


def boxes_of(prob: np.ndarray, letterbox: np.ndarray, params: DbParams, unpad: bool = True):
    """([N, 4] boxes in source pixels, [N] scores) of one [1, H, W] map."""
    prob = prob.reshape(prob.shape[-2:])
    height, width = prob.shape
    found = db_boxes(prob, Geometry((height, width), (height, width)), params)  # in the map's own pixels
    r, left, top, source_w, source_h = (float(v) for v in letterbox)
    boxes = found.xyxy
    if unpad:
        boxes = boxes - [left, top, left, top]
    boxes = boxes / r
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, source_w - 1)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, source_h - 1)
    return boxes.astype(np.float32), found.scores.astype(np.float32)


def planted(fault: str, boxes: np.ndarray, scores: np.ndarray, letterbox: np.ndarray):
    source_w, source_h = float(letterbox[3]), float(letterbox[4])
    if fault == "outside":
        boxes = boxes + np.array([source_w, 0, source_w, 0], np.float32)
    elif fault == "nan":
        scores = np.full_like(scores, np.nan)
    elif fault == "many":
        x, y = np.meshgrid(np.linspace(0, source_w - 6, 60), np.linspace(0, source_h - 6, 50))
        grid = np.stack([x.ravel(), y.ravel(), x.ravel() + 5, y.ravel() + 5], axis=1).astype(np.float32)
        boxes = np.concatenate([boxes, grid])
        scores = np.concatenate([scores, np.full(len(grid), 0.9, np.float32)])
    return boxes, scores


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.params = DbParams(thresh=float(p.get("thresh", "0.3")), box_thresh=float(p.get("box_thresh", "0.5")),
                               unclip_ratio=float(p.get("unclip_ratio", "1.6")))
        self.unpad = p.get("unpad", "true").lower() == "true"
        self.fault = p.get("fault", "")
        if self.fault not in FAULTS:
            raise pb_utils.TritonModelException(f"fault must be one of {FAULTS}, not {self.fault!r}")
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            maps = pb_utils.get_input_tensor_by_name(request, "prob_map").as_numpy()
            letterboxes = pb_utils.get_input_tensor_by_name(request, "letterbox").as_numpy()
            if not self.batched:
                maps, letterboxes = maps[None], letterboxes[None]
            found = [planted(self.fault, *boxes_of(m, lb, self.params, self.unpad), lb) for m, lb in zip(maps, letterboxes)]
            if len({len(s) for _, s in found}) > 1:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "the images of this request hold different numbers of boxes: send one image per request")))
                continue
            boxes, scores = np.stack([b for b, _ in found]), np.stack([s for _, s in found])
            if not self.batched:
                boxes, scores = boxes[0], scores[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("boxes", boxes),
                                                         pb_utils.Tensor("scores", scores)]))
        return responses
