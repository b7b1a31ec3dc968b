"""Which outputs of a deployment hold its boxes, and how to read them: by name, never by position.

The conventions detection deployments answer in (one image, the batch axis removed):

- ``quads``: boxes ``[-1, 4, 2]`` (a text detector's quadrilaterals, x, y corners) and
  scores ``[-1]``; this repository's ``detect_*`` ensembles answer ``BOXES`` and ``SCORES`` so;
- ``xyxy``: boxes ``[-1, 4]`` (x1, y1, x2, y2: torchvision's and EfficientNMS's default
  coding) and scores ``[-1]``, classes ``[-1]`` optional;
- ``xywh``: boxes ``[-1, 4]`` as x, y, width, height (COCO's coding): named so (``xywh``,
  ``ltwh``), or told apart from ``xyxy`` on the probe's answer (:meth:`BoxOutputs.settled`: a
  third value below the first, or a fourth below the second, is a width or a height; a box
  reaching beyond the image read as ``xywh`` is ``xyxy``);
- EfficientNMS (TensorRT's plugin, and YOLO exports using it): ``num_dets [1]``, ``det_boxes
  [max, 4]``, ``det_scores [max]``, ``det_classes [max]``: only the first ``num_dets`` rows count;
- anything else (a probability map, a raw head) is a raw ``output``, which a postprocessor
  (the spec's ``[postprocess]``, or ``--postprocess FILE.py:NAME``) turns into boxes on both sides.

Names decide which tensor is which (``box``/``quad``/``poly``, ``score``/``conf``/``prob``,
``class``/``label``, ``num``/``count``); shapes confirm it. A deployment may answer no box
scores (an OCR model's one score per word is its text's confidence): its boxes' scores are
then unknown (NaN, :data:`UNSCORED`), and nothing is judged by them.

Two records travel beside the boxes in a stage dict, read by the comparison:
:data:`UNSCORED` (the deployment answers no box scores) and :data:`AXIS_ALIGNED` (its boxes'
coding holds no rotation: the reference's boxes are compared as their enclosing boxes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from harness.detection.boxes import Detections

BOX_WORDS = ("box", "quad", "poly", "bbox")
SCORE_WORDS = ("score", "conf", "prob")
CLASS_WORDS = ("class", "label", "cls", "category")
COUNT_WORDS = ("num", "count")
XYWH_WORDS = ("xywh", "ltwh", "tlwh")
"""A ``[-1, 4]`` box output named so holds x, y, width, height."""
FLOAT_TYPES = ("TYPE_FP32", "TYPE_FP16", "TYPE_FP64")
INT_TYPES = ("TYPE_INT32", "TYPE_INT64", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT16", "TYPE_INT8", "TYPE_UINT8")


UNSCORED = "BOXES_UNSCORED"
"""A stage dict's record that the deployment answers no box scores (its score column is NaN)."""
AXIS_ALIGNED = "BOXES_AXIS_ALIGNED"
"""A stage dict's record that the deployment's boxes are axis-aligned by their coding (``xyxy``,
``xywh``): a rotation is not theirs to show."""
AXIS_ALIGNED_LAYOUTS = ("xyxy", "xywh")


class OutputError(ValueError):
    """An answer that does not hold what its outputs promised (one line, says which)."""


@dataclass(frozen=True)
class BoxOutputs:
    """The outputs holding one deployment's boxes (names as the server calls them)."""

    boxes: str
    scores: str | None
    """None: the deployment answers no box scores (:data:`UNSCORED`)."""
    layout: str
    """``quads`` ([-1, 4, 2]), ``xyxy`` or ``xywh`` ([-1, 4]), or ``auto``: as the answer's shape
    says (a trailing [4, 2] is quads, else xyxy)."""
    classes: str | None = None
    count: str | None = None
    """EfficientNMS's ``num_dets``: how many rows of the others count."""
    why: str = ""
    """How the layout was told (a name, the probe's boxes), for people."""
    unsettled: bool = False
    """The probe's boxes fit both codings: read as corners by default (the next probe image may tell)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.boxes, self.scores, self.classes, self.count) if n)

    def describe(self) -> str:
        coding = {"xyxy": "x1, y1, x2, y2", "xywh": "x, y, width, height"}.get(self.layout, self.layout)
        parts = [f"boxes {self.boxes} ({coding}{': ' + self.why if self.why else ''})",
                 f"scores {self.scores}" if self.scores else "no box scores"]
        parts += [f"classes {self.classes}"] if self.classes else []
        parts += [f"count {self.count}"] if self.count else []
        return ", ".join(parts)

    def coding(self, answer: Mapping[str, np.ndarray]) -> str:
        """``quads``, ``xyxy`` or ``xywh``: the layout, ``auto`` resolved by the answer's shape."""
        if self.layout != "auto":
            return self.layout
        return "quads" if np.shape(answer[self.boxes])[-2:] == (4, 2) else "xyxy"

    def settled(self, answer: Mapping[str, np.ndarray], size: tuple[int, int] | None) -> "BoxOutputs":
        """An ``xyxy`` read by its config alone, told apart from ``xywh`` by one image's ``answer``
        (``size``: its (height, width)): a box whose third value is below its first (or fourth
        below its second) holds a width (a height); one that would reach beyond the image as
        ``xywh`` holds corners. The probe's boxes fitting both, it stays ``xyxy``, and says so."""
        if self.layout != "xyxy" or self.why or self.boxes not in answer:
            return self
        boxes = np.asarray(answer[self.boxes], np.float64).reshape(-1, 4)
        if self.count is not None and self.count in answer:
            boxes = boxes[:max(0, int(np.asarray(answer[self.count]).reshape(-1)[0]))]
        boxes = boxes[np.isfinite(boxes).all(axis=1)]
        if ((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])).any():
            return replace(self, layout="xywh", why="a third value below the first on the probe: a width")
        if size is not None and len(boxes):
            height, width = size
            if ((boxes[:, 0] + boxes[:, 2] > width + 1) | (boxes[:, 1] + boxes[:, 3] > height + 1)).any():
                return replace(self, why="as x, y, width, height a box of the probe would leave the image")
        why = ("the probe answered no box to tell a width from a corner by" if not len(boxes) else
               "the probe's boxes fit x, y, width, height as well")
        return replace(self, why=f"by default: {why}", unsettled=True)

    def read(self, answer: Mapping[str, np.ndarray]) -> Detections:
        """One image's :class:`Detections` from its answer (outputs by name, batch axis removed)."""
        missing = [n for n in self.names if n not in answer]
        if missing:
            raise OutputError(f"the answer lacks {', '.join(missing)}")
        boxes = np.asarray(answer[self.boxes], np.float64)
        layout = self.coding(answer)
        corners = 8 if layout == "quads" else 4
        scores = (np.asarray(answer[self.scores], np.float64).reshape(-1) if self.scores
                  else np.full(boxes.size // corners, np.nan))
        classes = None if self.classes is None else np.asarray(answer[self.classes]).reshape(-1)
        if boxes.size % corners:
            raise OutputError(f"{self.boxes} holds {boxes.size} values, not whole boxes of {corners}")
        boxes = boxes.reshape(-1, corners)
        if self.count is not None:
            n = int(np.asarray(answer[self.count]).reshape(-1)[0])
            if not 0 <= n <= len(boxes):
                raise OutputError(f"{self.count} says {n} detections, {self.boxes} holds {len(boxes)}")
            boxes, scores = boxes[:n], scores[:n]
            classes = None if classes is None else classes[:n]
        if len(scores) != len(boxes) or (classes is not None and len(classes) != len(boxes)):
            raise OutputError(f"{len(boxes)} boxes in {self.boxes} but {len(scores)} scores in {self.scores}"
                              + (f" and {len(classes)} classes in {self.classes}" if classes is not None else ""))
        if classes is not None and not np.isfinite(np.asarray(classes, np.float64)).all():
            raise OutputError(f"{self.classes} holds a class that is not a number")
        if layout == "quads":
            return Detections(boxes.reshape(-1, 4, 2), scores, classes)
        if layout == "xywh":
            boxes = np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], axis=1)
        return Detections.from_xyxy(boxes, scores, classes)


def _named(tensor, words) -> bool:
    return any(w in tensor.name.lower() for w in words)


def _per_box(tensor) -> int | None:
    """The values per box of an output shaped ``[n, 4]`` (4) or ``[n, 4, 2]`` (8); else None."""
    dims = list(tensor.dims)
    if dims[-2:] == [4, 2] and len(dims) == 3:
        return 8
    if len(dims) == 2 and dims[-1] == 4:
        return 4
    return None


def find_box_outputs(outputs: Sequence, scored: bool = True) -> BoxOutputs | None:
    """The :class:`BoxOutputs` among a model's outputs (``TensorInfo``: ``name``, ``data_type``,
    ``dims`` without the batch axis), or None when they hold no boxes (a raw output); ``scored``
    False: boxes without a scores output are boxes too (an OCR model's, whose one score per word
    its caller took as the text's)."""
    floats = [t for t in outputs if t.data_type in FLOAT_TYPES]
    boxes = [t for t in floats if _per_box(t) and _named(t, BOX_WORDS)] or [t for t in floats if _per_box(t)]
    if len(boxes) != 1:
        return None
    box = boxes[0]
    rest = [t for t in outputs if t is not box]
    vectors = [t for t in rest if len(t.dims) == 1]
    scores = [t for t in vectors if t.data_type in FLOAT_TYPES and _named(t, SCORE_WORDS)]
    if len(scores) != 1:
        others = [t for t in vectors if t.data_type in FLOAT_TYPES and not _named(t, CLASS_WORDS + COUNT_WORDS)]
        scores = others if len(others) == 1 else []
    if not scores and scored:
        return None
    score = scores[0] if scores else None
    classes = [t for t in vectors if t is not score and _named(t, CLASS_WORDS)]
    count = [t for t in rest if t.data_type in INT_TYPES and _named(t, COUNT_WORDS) and list(t.dims) in ([1], [])]
    layout, why = "quads", ""
    if _per_box(box) == 4:
        layout, why = (("xywh", f"named {box.name}") if _named(box, XYWH_WORDS) else
                       ("xyxy", f"named {box.name}") if _named(box, ("xyxy", "x1y1")) else ("xyxy", ""))
    return BoxOutputs(box.name, score.name if score else None, layout, classes[0].name if len(classes) == 1 else None,
                      count[0].name if len(count) == 1 else None, why)
