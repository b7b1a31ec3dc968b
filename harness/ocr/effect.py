"""The effect of a deployment on a labeled OCR set (COCO JSON whose annotations carry their word:
COCO-Text's ``utf8_string`` or a plain ``text``): per path, word accuracy and the character
error rate over the labeled words (a labeled word whose box is not found counts as read as
nothing), end-to-end precision, recall and F1 at IoU 0.5 (a found word counts when its box
matches a labeled one and its text is equal), and McNemar's exact test on the per-image
outcomes (an image is right when every labeled word is read exactly and nothing else is
found), reference vs each deployed path; beside it, the detection task's own effect on the boxes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from harness.compare.paired import McNemar, mcnemar_exact
from harness.detection.boxes import Detections, greedy_match, iou_matrix
from harness.detection.effect import IOU_THRESHOLD, DetectionEffect, LabelsError, evaluate_detection, load_labels, read_json
from harness.ocr.compare import edit_distance


def load_words(source: Path | dict) -> dict[str, list[str | None]]:
    """File name -> each annotation's word, in the annotations' order (None: it carries none)."""
    coco = read_json(Path(source), "COCO-Text") if not isinstance(source, dict) else source
    images = {int(im["id"]): str(im["file_name"]) for im in coco["images"]}
    words: dict[str, list[str | None]] = {name: [] for name in images.values()}
    for a in coco["annotations"]:
        attributes = a.get("attributes")
        text = a.get("utf8_string", a.get("text", attributes.get("text") if isinstance(attributes, dict) else None))
        words[images[a["image_id"]]].append(None if text is None else str(text))
    if not any(w is not None for ws in words.values() for w in ws):
        raise LabelsError(f"{source if not isinstance(source, dict) else 'labels'}: no annotation carries its word "
                          "(`utf8_string`, as COCO-Text, or `text`): nothing to score text with")
    return words


@dataclass(frozen=True)
class WordOutcome:
    image: str
    labeled: int
    found: int
    exact: int
    """Labeled words whose matched box's text is equal."""
    errors: int
    """Characters wrong over the labeled words (edit distance; a word not found: its length)."""
    chars: int

    @property
    def right(self) -> bool:
        return self.exact == self.labeled == self.found


@dataclass(frozen=True)
class PathWords:
    path: str
    word_accuracy: float | None
    cer: float | None
    precision: float | None
    recall: float | None
    f1: float | None
    images_right: int
    outcomes: tuple[WordOutcome, ...]
    mcnemar: McNemar | None = None
    changes: Mapping[str, str] | None = None

    @property
    def labeled(self) -> int:
        """The labeled words scored (those carrying their word)."""
        return sum(o.labeled for o in self.outcomes)

    def changed(self, ties: bool = True) -> int:
        return sum(ties or v != "tie" for v in (self.changes or {}).values())

    def to_dict(self) -> dict:
        return {"path": self.path, "labeled_words": self.labeled, "word_accuracy": self.word_accuracy, "cer": self.cer,
                "precision": self.precision,
                "recall": self.recall, "f1": self.f1, "images_right": self.images_right,
                "mcnemar": self.mcnemar.to_dict() if self.mcnemar else None,
                "changes": None if self.changes is None else dict(sorted(self.changes.items()))}


@dataclass(frozen=True)
class OcrEffect:
    paths: tuple[PathWords, ...]
    boxes: DetectionEffect
    """The detection task's effect on the same paths' boxes."""

    @property
    def evaluated(self) -> tuple[str, ...]:
        return self.boxes.evaluated

    def to_dict(self, names: Sequence[str] | None = None) -> dict:
        return {"task": "ocr", "iou_threshold": IOU_THRESHOLD, "evaluated": len(self.evaluated),
                "left_out": list(self.boxes.left_out), "paths": [p.to_dict() for p in self.paths],
                "boxes": self.boxes.to_dict(names)}

    def any_changes(self, ties: bool = True) -> bool:
        return any(p.changed(ties) for p in self.paths[1:])

    def cases(self, models: Sequence[str], ties_fail: bool, group: str) -> list:
        from harness.results.interface import Case, Status

        out = []
        for path, model in zip(self.paths[1:], models):
            changed = sorted(n for n, v in (path.changes or {}).items() if ties_fail or v != "tie")
            reason = (f"words or boxes changed on {len(changed)} of {len(self.evaluated)} images: " + ", ".join(changed[:10])
                      if changed else "no word or box change")
            out.append(Case(str(model), group, Status.FAILED if changed else Status.PASSED, reason, ""))
        return out

    def markdown(self, names: Sequence[str] | None = None, shown: int = 50) -> list[str]:
        def pct(v):
            return "-" if v is None else f"{v:.1%}"

        lines = [f"Words over the {len(self.evaluated)} labeled images every path read: word accuracy and character "
                 "error rate over the labeled words (a word whose box is not found is read as nothing); end to end, a "
                 f"found word counts when its box matches a labeled one at IoU {IOU_THRESHOLD} and its text is equal. "
                 "An image is *right* when every labeled word is read exactly and nothing else is found.", "",
                 "| path | word accuracy | CER | end-to-end precision | recall | F1 | images right | McNemar b/c, p "
                 "| images whose words or boxes changed |", "|---|" + "---:|" * 8]
        for p in self.paths:
            test = f"{p.mcnemar.b}/{p.mcnemar.c}, {p.mcnemar.p_value:.3g}" if p.mcnemar else ""
            changed = "" if p.changes is None else str(p.changed())
            cer = "-" if p.cer is None else f"{p.cer:.4f}"
            lines.append(f"| {p.path} | {pct(p.word_accuracy)} | {cer} | {pct(p.precision)} | {pct(p.recall)} | "
                         f"{pct(p.f1)} | {p.images_right} / {len(p.outcomes)} | {test} | {changed} |")
        return [*lines, "", "Boxes:", "", *self.boxes.markdown(names, shown)]


def word_outcome(image: str, labeled: Detections, words: Sequence[str | None], found: Detections,
                 texts: Sequence[str]) -> WordOutcome:
    """One image's words: the found boxes matched one to one to the labeled ones (best score first)."""
    keep = [i for i, w in enumerate(words) if w is not None]  # a box without its word is not scored on text
    pairs = greedy_match(iou_matrix(found.quads, labeled.quads[keep]), found.scores, IOU_THRESHOLD)
    read = {keep[lab]: str(texts[f]) for f, lab in pairs}
    exact = sum(read.get(i) == words[i] for i in keep)
    errors = sum(edit_distance(words[i], read.get(i, "")) for i in keep)
    return WordOutcome(image, len(keep), len(found), exact, errors, sum(len(words[i]) for i in keep))


def evaluate_ocr(source: Path, predictions: Sequence[tuple[str, Mapping[str, tuple[Detections, Sequence[str]]]]],
                 changes: Sequence[Mapping[str, str]] | None = None) -> OcrEffect:
    """Score each path (``(name, file name -> (boxes, texts))``, the reference first) on the labeled
    images every path read."""
    labels, words = load_labels(source), load_words(source)
    boxes = evaluate_detection(labels, [(path, {n: d for n, (d, _) in found.items()}) for path, found in predictions],
                               changes=changes)
    evaluated = boxes.evaluated
    outcomes = {path: tuple(word_outcome(n, labels.boxes[n], words[n], *found[n]) for n in evaluated)
                for path, found in predictions}
    reference_right = np.array([o.right for o in outcomes[predictions[0][0]]], bool)
    paths = []
    for k, (path, _) in enumerate(predictions):
        rows = outcomes[path]
        labeled, found, exact = (sum(getattr(o, f) for o in rows) for f in ("labeled", "found", "exact"))
        chars, errors = sum(o.chars for o in rows), sum(o.errors for o in rows)
        right = np.array([o.right for o in rows], bool)
        paths.append(PathWords(path, exact / labeled if labeled else None, errors / chars if chars else None,
                               exact / found if found else None, exact / labeled if labeled else None,
                               2 * exact / (found + labeled) if found + labeled else None, int(right.sum()), rows,
                               mcnemar_exact(reference_right, right) if k else None,
                               ({n: v for n, v in changes[k - 1].items() if n in evaluated} if changes else {}) if k
                               else None))
    return OcrEffect(tuple(paths), boxes)
