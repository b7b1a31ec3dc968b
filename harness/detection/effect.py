"""The effect of a deployment on a labeled detection set (COCO JSON): precision, recall and F1
at IoU 0.5 (the ICDAR 2015 protocol for text: one-to-one matches, IoU strictly above 0.5,
on the quadrilaterals), COCO mAP with pycocotools (axis-aligned boxes, every class), and
McNemar's exact test on the per-image outcomes (an image is right when every labeled box is
found and nothing else is), reference vs each deployed path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from harness import MAX_IMAGE_PIXELS
from harness.compare.paired import McNemar, mcnemar_exact
from harness.detection.boxes import Detections, greedy_match, iou_matrix

IOU_THRESHOLD = 0.5


class LabelsError(ValueError):
    """A labels file that is not usable COCO detection JSON (one line, says where)."""


@dataclass(frozen=True, eq=False)
class Labels:
    """A COCO detection set: each image's labeled boxes, by file name."""

    coco: dict
    """The JSON as read (pycocotools is given it as is)."""
    boxes: Mapping[str, Detections]
    """File name -> its labeled boxes (score 1; classes = category ids)."""
    ids: Mapping[str, int]
    """File name -> COCO image id."""
    unusable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """File name -> why its annotations cannot be used (a NaN, infinite or absurd box): that
    image's failed row; its annotations are left out of :attr:`coco`."""


def read_json(source: Path, what: str = "labels") -> object:
    """A label file's JSON, or :class:`LabelsError` in one line (not JSON, or nested deeper than
    Python's parser goes: a file of 100,000 brackets is refused, not a traceback)."""
    try:
        return json.loads(source.read_text())
    except RecursionError:
        raise LabelsError(f"{source}: {what} nested too deep to be JSON labels") from None
    except (OSError, ValueError) as exc:
        raise LabelsError(f"{source}: not {what} JSON ({type(exc).__name__}: {exc})") from None


def load_labels(source: Path | dict) -> Labels:
    """Read COCO JSON; a 4-point ``segmentation`` is the box's quad, otherwise its ``bbox``. An
    annotation whose box cannot be used (not finite, a negative size, beyond any image the
    deployment decodes) makes its image unusable (:attr:`Labels.unusable`), not the file."""
    where = str(source) if isinstance(source, Path) else "labels"
    try:
        coco = read_json(source, "COCO detection") if isinstance(source, Path) else source
        images = {int(im["id"]): str(im["file_name"]) for im in coco["images"]}
        categories = {int(c["id"]) for c in coco["categories"]}
        annotations = list(coco["annotations"])
    except LabelsError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LabelsError(f"{where}: not COCO detection JSON ({type(exc).__name__}: {exc})") from None
    quads: dict[int, list] = {i: [] for i in images}
    classes: dict[int, list] = {i: [] for i in images}
    unusable: dict[str, str] = {}
    for a in annotations:
        if not isinstance(a, dict):
            raise LabelsError(f"{where}: an annotation is {type(a).__name__}, not an object")
        image, category = a.get("image_id"), a.get("category_id")
        if image not in images or category not in categories:
            raise LabelsError(f"{where}: annotation {a.get('id')} names image {image} / category {category}, "
                              "which the file does not define")
        try:
            quads[image].append(_quad(a))
        except ValueError as exc:
            unusable.setdefault(images[image], str(exc))
            continue
        classes[image].append(category)
    if unusable:  # pycocotools is given only the annotations every image can be scored with
        bad = {i for i, name in images.items() if name in unusable}
        coco = {**coco, "annotations": [a for a in annotations if a.get("image_id") not in bad]}
    boxes = {images[i]: Detections(np.array(quads[i]).reshape(-1, 4, 2), np.ones(len(quads[i])), classes[i])
             for i in images}
    return Labels(coco, boxes, {name: i for i, name in images.items()}, unusable)


def _number(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer of 400 digits
        return math.inf


def _quad(annotation: dict) -> np.ndarray:
    """The annotation's quad, or ValueError saying why it cannot be used (no quad or bbox of numbers,
    not finite, a negative size, beyond any image): its image's row, never the whole file."""
    segmentation = annotation.get("segmentation")
    quad8 = isinstance(segmentation, list) and len(segmentation) == 1 and isinstance(segmentation[0], list) \
        and len(segmentation[0]) == 8
    what = "segmentation" if quad8 else "bbox"
    values = segmentation[0] if quad8 else annotation.get("bbox")
    if not isinstance(values, list) or len(values) != (8 if quad8 else 4) \
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"annotation {annotation.get('id')} has neither a 4-point segmentation nor a bbox of four "
                         f"numbers (its {what}: {str(values)[:80]})")
    with np.errstate(over="ignore", invalid="ignore"):
        numbers = np.array([_number(v) for v in values], np.float64)
        if quad8:
            quad, sizes = numbers.reshape(4, 2), ()
        else:
            x, y, w, h = numbers
            quad, sizes = np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]]), (w, h)
    if not np.isfinite(quad).all():
        raise ValueError(f"annotation {annotation.get('id')}'s {what} {values} is not finite")
    if any(side < 0 for side in sizes):
        raise ValueError(f"annotation {annotation.get('id')}'s bbox {values} has a negative size")
    if np.abs(quad).max() > MAX_IMAGE_PIXELS:
        raise ValueError(f"annotation {annotation.get('id')}'s {what} {values} lies beyond any image the deployment "
                         f"decodes (more than {MAX_IMAGE_PIXELS} pixels from the origin)")
    return quad


@dataclass(frozen=True)
class ImageOutcome:
    image: str
    labeled: int
    detected: int
    matched: int

    @property
    def right(self) -> bool:
        """Every labeled box found, nothing else found."""
        return self.matched == self.labeled == self.detected


@dataclass(frozen=True)
class PathEffect:
    path: str
    precision: float | None
    """None when the path detected nothing (no precision to speak of)."""
    recall: float | None
    """None when nothing is labeled."""
    f1: float | None
    matched: int
    detected: int
    labeled: int
    coco_map: float | None
    """COCO mAP@[.5:.95] (pycocotools, on the quads' enclosing boxes); None when boxes cannot
    be given a category or nothing is labeled."""
    coco_map50: float | None
    images_right: int
    mcnemar: McNemar | None = None
    """Against the reference on :attr:`ImageOutcome.right` (None for the reference itself)."""
    outcomes: tuple[ImageOutcome, ...] = ()
    changes: Mapping[str, str] | None = None
    """Image -> ``diverged`` or ``tie`` where this path's boxes differ from the reference's
    (:func:`harness.detection.compare.compare_detections`; None for the reference itself)."""

    def changed(self, ties: bool = True) -> int:
        return sum(ties or v != "tie" for v in (self.changes or {}).values())

    def to_dict(self) -> dict:
        return {"path": self.path, "precision": self.precision, "recall": self.recall, "f1": self.f1,
                "matched": self.matched, "detected": self.detected, "labeled": self.labeled, "coco_map": self.coco_map,
                "coco_map50": self.coco_map50, "images_right": self.images_right,
                "mcnemar": self.mcnemar.to_dict() if self.mcnemar else None,
                "box_changes": None if self.changes is None else dict(sorted(self.changes.items())),
                "images": {o.image: [o.labeled, o.detected, o.matched] for o in self.outcomes}}


@dataclass(frozen=True)
class DetectionEffect:
    paths: tuple[PathEffect, ...]
    """The reference first."""
    evaluated: tuple[str, ...]
    """The images every path detected on: the only ones scored."""
    left_out: tuple[str, ...]
    """Labeled images some path has no detections for (failed there): named, never dropped silently."""
    iou_threshold: float = IOU_THRESHOLD

    def to_dict(self, names: Sequence[str] | None = None) -> dict:
        return {"task": "detection", "iou_threshold": self.iou_threshold, "evaluated": len(self.evaluated),
                "left_out": list(self.left_out), "paths": [p.to_dict() for p in self.paths]}

    def any_changes(self, ties: bool = True) -> bool:
        """A deployed path whose boxes differ from the reference's on some image (near-threshold
        changes counted only with ``ties``)."""
        return any(p.changed(ties) for p in self.paths[1:])

    def cases(self, models: Sequence[str], ties_fail: bool, group: str) -> list:
        """One test case per deployed path (:class:`harness.results.interface.Case`): failed when
        its boxes changed on an image beyond the near-threshold margin (any change with ``ties_fail``)."""
        from harness.results.interface import Case, Status

        ref, out = self.paths[0], []
        for path, model in zip(self.paths[1:], models):
            changed = sorted(n for n, v in (path.changes or {}).items() if ties_fail or v != "tie")
            f1 = "" if path.f1 is None or ref.f1 is None else f"; F1 {path.f1:.3f} against the reference's {ref.f1:.3f}"
            reason = (f"boxes changed on {len(changed)} of {len(self.evaluated)} images"
                      + ("" if ties_fail else " beyond the near-threshold margin") + f"{f1}: " + ", ".join(changed[:10])
                      if changed else "no box change" + ("" if ties_fail else " beyond the near-threshold margin") + f1)
            out.append(Case(str(model), group, Status.FAILED if changed else Status.PASSED, reason,
                            "\n".join(f"{n}: {v}" for n, v in sorted((path.changes or {}).items()))))
        return out

    def markdown(self, names: Sequence[str] | None = None, shown: int = 50) -> list[str]:
        from harness.formatting import fmt
        from harness.names import markdown_code

        def pct(v):
            return "-" if v is None else f"{v:.1%}"

        ref = self.paths[0]
        lines = [f"Detection at IoU {self.iou_threshold} (one to one, best score first; the ICDAR 2015 protocol), "
                 f"over the {len(self.evaluated)} labeled images every path detected on; COCO mAP by pycocotools on "
                 "the boxes' enclosing rectangles. An image is *right* when every labeled box is found and nothing "
                 "else.", "",
                 "| path | precision | recall | F1 | F1 diff | COCO mAP | mAP@0.5 | images right | McNemar b/c, p "
                 "| images whose boxes changed (near threshold) |", "|---|" + "---:|" * 9]
        for p in self.paths:
            diff = "" if p is ref or p.f1 is None or ref.f1 is None else f"{100 * (p.f1 - ref.f1):+.1f} pts"
            test = f"{p.mcnemar.b}/{p.mcnemar.c}, {p.mcnemar.p_value:.3g}" if p.mcnemar else ""
            changed = "" if p.changes is None else f"{p.changed()} ({p.changed() - p.changed(ties=False)})"
            lines.append(f"| {p.path} | {pct(p.precision)} | {pct(p.recall)} | {pct(p.f1)} | {diff} | "
                         f"{fmt(p.coco_map)} | {fmt(p.coco_map50)} | {p.images_right} / {len(p.outcomes)} | {test} | "
                         f"{changed} |")
        if self.left_out:
            lines += ["", f"Left out ({len(self.left_out)}: some path detected nothing there, it failed): "
                      + ", ".join(markdown_code(n) for n in self.left_out[:shown])]
        for p in self.paths[1:]:
            if p.changes:
                rows = sorted(p.changes.items())
                lines += ["", f"## `{p.path}`: images whose boxes changed"
                          + (f" (first {shown} of {len(rows)})" if len(rows) > shown else ""), "",
                          "| image | verdict | labeled | reference found | deployed found |", "|---|---|---:|---:|---:|"]
                ref_rows = {o.image: o for o in ref.outcomes}
                own = {o.image: o for o in p.outcomes}
                lines += [f"| {markdown_code(n)} | {'**diverged**' if v == 'diverged' else v} | {own[n].labeled} | "
                          f"{ref_rows[n].matched} of {ref_rows[n].detected} | {own[n].matched} of {own[n].detected} |"
                          for n, v in rows[:shown]]
        return lines


def image_outcome(image: str, labeled: Detections, detected: Detections, iou_threshold: float = IOU_THRESHOLD) -> ImageOutcome:
    """One-to-one matches of one image's detections (best score first) to its labels."""
    same_class = None
    if labeled.classes is not None and detected.classes is not None:
        same_class = detected.classes[:, None] == labeled.classes[None, :]
    pairs = greedy_match(iou_matrix(detected.quads, labeled.quads), detected.scores, iou_threshold, same_class)
    return ImageOutcome(image, len(labeled), len(detected), len(pairs))


def evaluate_detection(labels: Labels, predictions: Sequence[tuple[str, Mapping[str, Detections]]],
                       iou_threshold: float = IOU_THRESHOLD,
                       changes: Sequence[Mapping[str, str]] | None = None) -> DetectionEffect:
    """Score each path (``(name, file name -> detections)``, the reference first) on the
    labeled images that every path has detections for; ``changes``: per deployed path, the
    images whose boxes differ from the reference's (:attr:`PathEffect.changes`)."""
    names = list(labels.boxes)
    categories = sorted(int(c["id"]) for c in labels.coco["categories"])
    predictions = [(path, {n: as_categories(d, categories) for n, d in found.items()}) for path, found in predictions]
    evaluated = tuple(n for n in names if all(n in found for _, found in predictions))
    left_out = tuple(n for n in names if n not in evaluated)
    outcomes = {path: tuple(image_outcome(n, labels.boxes[n], found[n], iou_threshold) for n in evaluated)
                for path, found in predictions}
    reference_right = np.array([o.right for o in outcomes[predictions[0][0]]], bool)
    paths = []
    for k, (path, found) in enumerate(predictions):
        rows = outcomes[path]
        matched, detected, labeled = (sum(getattr(o, f) for o in rows) for f in ("matched", "detected", "labeled"))
        precision = matched / detected if detected else None
        recall = matched / labeled if labeled else None
        f1 = None if precision is None or recall is None else 2 * matched / (detected + labeled)
        right = np.array([o.right for o in rows], bool)
        coco_map, coco_map50 = coco_mean_ap(labels, {n: found[n] for n in evaluated})
        paths.append(PathEffect(path, precision, recall, f1, matched, detected, labeled, coco_map, coco_map50,
                                int(right.sum()), mcnemar_exact(reference_right, right) if k else None, rows,
                                ({n: v for n, v in changes[k - 1].items() if n in evaluated} if changes else {}) if k
                                else None))
    return DetectionEffect(tuple(paths), evaluated, left_out, iou_threshold)


def as_categories(d: Detections, categories: Sequence[int]) -> Detections:
    """A detector's classes in the labels' COCO category ids: none for a set of one category
    (every box is of it: a text detector's, or a one-class model's index 0); as they are when
    they are category ids already; else read as 0-based indices into the categories sorted by
    id, as models number their classes (COCO's own ids run 1 to 90 with gaps)."""
    if d.classes is None or len(categories) == 1:
        return Detections(d.quads, d.scores) if d.classes is not None else d
    known = set(categories)
    if all(int(c) in known for c in d.classes):
        return d
    if all(0 <= int(c) < len(categories) for c in d.classes):
        return Detections(d.quads, d.scores, np.asarray(categories)[d.classes])
    return d  # neither: matched by id, and a class no category has matches nothing


def coco_mean_ap(labels: Labels, detections: Mapping[str, Detections]) -> tuple[float | None, float | None]:
    """(mAP@[.5:.95], mAP@.5) of ``detections`` on those images, by pycocotools' COCOeval on
    axis-aligned boxes. Class-less detections take the set's only category; with several
    categories and no classes: (None, None)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    categories = [c["id"] for c in labels.coco["categories"]]
    results = []
    for name, d in detections.items():
        if d.classes is None and len(categories) != 1:
            return None, None
        classes = d.classes if d.classes is not None else np.full(len(d), categories[0])
        for (x1, y1, x2, y2), score, category in zip(d.xyxy, d.scores, classes):
            results.append({"image_id": labels.ids[name], "category_id": int(category),
                            "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)], "score": float(score)})
    ids = {labels.ids[n] for n in detections}
    annotations = [_with_bbox(a) for a in labels.coco["annotations"] if a["image_id"] in ids]
    if not annotations:
        return None, None
    if not results:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        gt = COCO()
        gt.dataset = {**labels.coco, "annotations": annotations}
        gt.createIndex()
        run = COCOeval(gt, gt.loadRes(results), "bbox")
        run.params.imgIds = sorted(ids)
        run.evaluate()
        run.accumulate()
        run.summarize()
    return float(max(run.stats[0], 0.0)), float(max(run.stats[1], 0.0))


def _with_bbox(annotation: dict) -> dict:
    """An annotation as COCOeval's bbox mode needs it: ``bbox`` the enclosing box of the
    label's quad (as the detections' boxes are of theirs: both sides measured alike, where a
    turned word's ink box would be tighter than any quad's), ``area``, ``iscrowd``."""
    x1, y1, x2, y2 = Detections(_quad(annotation)[None], [1.0]).xyxy[0]
    bbox = [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]
    return dict(annotation, bbox=bbox, area=bbox[2] * bbox[3], iscrowd=annotation.get("iscrowd", 0))
