"""What a detector finds in one image: :class:`Detections`, and the IoU of two sets of them.

Every box is a quadrilateral ``[4, 2]`` of (x, y) in the source image's pixels, corners
clockwise from the top left: text detectors give rotated quads, object detectors give
axis-aligned boxes (``from_xyxy``), and one type compares both. IoU is computed on the
polygons with shapely (vectorized), so a rotated word is measured as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely


@dataclass(frozen=True, eq=False)
class Detections:
    """The boxes of one image; ``scores`` and ``classes`` one per box (``classes`` None for a
    class-less detector, e.g. text)."""

    quads: np.ndarray
    """float64 [N, 4, 2]: (x, y) corners clockwise from the top left, source pixels."""
    scores: np.ndarray
    """float64 [N]."""
    classes: np.ndarray | None = None
    """int64 [N], or None."""

    def __post_init__(self):
        quads = np.asarray(self.quads, np.float64).reshape(-1, 4, 2)
        scores = np.asarray(self.scores, np.float64).reshape(-1)
        if len(scores) != len(quads):
            raise ValueError(f"{len(quads)} boxes but {len(scores)} scores")
        object.__setattr__(self, "quads", quads)
        object.__setattr__(self, "scores", scores)
        if self.classes is not None:
            classes = np.asarray(self.classes, np.int64).reshape(-1)
            if len(classes) != len(quads):
                raise ValueError(f"{len(quads)} boxes but {len(classes)} classes")
            object.__setattr__(self, "classes", classes)

    def __len__(self) -> int:
        return len(self.quads)

    @staticmethod
    def empty(with_classes: bool = False) -> "Detections":
        return Detections(np.zeros((0, 4, 2)), np.zeros(0), np.zeros(0, np.int64) if with_classes else None)

    @staticmethod
    def from_xyxy(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray | None = None) -> "Detections":
        """Axis-aligned ``[N, 4]`` (x1, y1, x2, y2) boxes."""
        b = np.asarray(boxes, np.float64).reshape(-1, 4)
        x1, y1, x2, y2 = b.T
        quads = np.stack([np.stack([x1, y1], -1), np.stack([x2, y1], -1), np.stack([x2, y2], -1), np.stack([x1, y2], -1)], 1)
        return Detections(quads, scores, classes)

    @property
    def xyxy(self) -> np.ndarray:
        """[N, 4] enclosing axis-aligned boxes."""
        return np.concatenate([self.quads.min(axis=1), self.quads.max(axis=1)], axis=1) if len(self) else np.zeros((0, 4))

    def select(self, keep: np.ndarray) -> "Detections":
        """The boxes at ``keep`` (indices or a mask), in that order."""
        return Detections(self.quads[keep], self.scores[keep], None if self.classes is None else self.classes[keep])

    def to_dict(self) -> dict:
        """Plain lists (JSON); coordinates and scores as floats."""
        return {"quads": self.quads.tolist(), "scores": self.scores.tolist(),
                "classes": None if self.classes is None else self.classes.tolist()}

    def to_array(self) -> np.ndarray:
        """float64 [N, 10]: the 8 corner coordinates, the score, the class (NaN without
        classes): how the ``postprocess`` stage travels in stage dicts, saved tensors and
        ``harness compare`` (arrays everywhere, like every other stage)."""
        classes = np.full(len(self), np.nan) if self.classes is None else self.classes.astype(np.float64)
        return np.concatenate([self.quads.reshape(-1, 8), self.scores[:, None], classes[:, None]], axis=1)

    @staticmethod
    def from_array(array: np.ndarray) -> "Detections":
        """The inverse of :meth:`to_array`."""
        a = np.asarray(array, np.float64).reshape(-1, 10)
        classes = a[:, 9]
        with_classes = len(a) and not np.isnan(classes).all()
        return Detections(a[:, :8].reshape(-1, 4, 2), a[:, 8],
                          np.nan_to_num(classes, nan=-1).astype(np.int64) if with_classes else None)

    @staticmethod
    def from_dict(d: dict) -> "Detections":
        quads = np.asarray(d["quads"], np.float64).reshape(-1, 4, 2)
        return Detections(quads, d["scores"], d.get("classes"))


def order_clockwise(quad: np.ndarray) -> np.ndarray:
    """The 4 corners of a quad as top-left, top-right, bottom-right, bottom-left (the two
    leftmost by x are the left side, each side ordered by y: PaddleOCR's rule)."""
    quad = np.asarray(quad, np.float64).reshape(4, 2)
    by_x = quad[np.argsort(quad[:, 0], kind="stable")]
    left = by_x[:2][np.argsort(by_x[:2, 1], kind="stable")]
    right = by_x[2:][np.argsort(by_x[2:, 1], kind="stable")]
    return np.array([left[0], right[0], right[1], left[1]])


def polygons(quads: np.ndarray) -> np.ndarray:
    """shapely polygons of ``[N, 4, 2]`` quads (an invalid, self-crossing one is repaired by
    ``make_valid`` so its area is what it covers)."""
    polys = shapely.polygons(np.asarray(quads, np.float64).reshape(-1, 4, 2))
    invalid = ~shapely.is_valid(polys)
    if invalid.any():
        polys[invalid] = shapely.make_valid(polys[invalid])
    return polys


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] IoU of two sets of quads ``[N, 4, 2]`` (0 where a union is empty)."""
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))
    pa, pb = polygons(a), polygons(b)
    inter = shapely.area(shapely.intersection(pa[:, None], pb[None, :]))
    union = shapely.area(pa)[:, None] + shapely.area(pb)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def greedy_match(iou: np.ndarray, scores: np.ndarray, threshold: float,
                 same_class: np.ndarray | None = None) -> list[tuple[int, int]]:
    """One-to-one pairs (row, column) of an IoU matrix: rows in descending score order (ties
    by index), each takes the free column of highest IoU above ``threshold`` (strictly, as
    the ICDAR 2015 protocol; COCO's rule too but for the equality). ``same_class``: a
    [rows, cols] mask of the pairs allowed."""
    allowed = iou > threshold
    if same_class is not None:
        allowed &= same_class
    taken = np.zeros(iou.shape[1], bool)
    pairs = []
    for row in np.argsort(-np.asarray(scores, np.float64), kind="stable"):
        candidates = np.where(allowed[row] & ~taken, iou[row], -1.0)
        if candidates.size and candidates.max() >= 0:
            col = int(np.argmax(candidates))
            taken[col] = True
            pairs.append((int(row), col))
    return pairs
