"""The effect of a deployment on a labeled segmentation set: masks as PNG files of the same stem
as each photo (0/255, or 0/1, for one class; class indices for several), in a folder of their own.

Per path (the reference first): the mean IoU, Dice and boundary F (2 px) of its masks against
the labels (the label's foreground: its non-zero pixels) and the mean absolute error of its
matte against the label as 0/1; and, against the reference, the Wilcoxon signed-rank test on
the per-image IoU (two-sided; p 1.0 where no image's IoU differs). A label that is missing,
unreadable or of another size than its photo is that image's error row, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from harness.segmentation.compare import mask_metrics

MASK_SUFFIX = ".png"
FIGURES = ("iou", "dice", "boundary_f", "matte_mae")


class MaskLabelError(ValueError):
    """One image's label cannot be used (one line, says which file and why)."""


def mask_name(image: str | Path) -> str:
    """The file name of the label of ``image`` (the photo's file, by its real name, not as a
    report shows it): the PNG of its stem."""
    return f"{Path(image).stem}{MASK_SUFFIX}"


def load_mask(masks: Path, image: str | Path, size: tuple[int, int]) -> np.ndarray:
    """The label of the photo ``image`` in the folder ``masks`` as class indices (one class: 0/1),
    checked against the photo's ``size`` (H, W). It is read as an input is (a regular file inside
    the folder: a link leading out is refused, :func:`harness.listing.file_in`), passes the image
    guard (:func:`harness.preprocessing.image_check.inspect`) and is refused by its header's size
    before any pixel is decoded: a label is no costlier than the photo it labels."""
    import cv2

    from harness.files import InputFileError
    from harness.listing import file_in, read_input
    from harness.names import path_text
    from harness.preprocessing.image_check import ImageError, inspect

    name = mask_name(image)
    try:
        data = read_input(file_in(masks, name))
    except FileNotFoundError:
        raise MaskLabelError(f"no label: {path_text(Path(masks) / name)} is missing") from None
    except InputFileError as exc:
        raise MaskLabelError(f"{path_text(name)}: {exc.reason}") from None
    try:
        header = inspect(data)
    except ImageError as exc:
        raise MaskLabelError(f"{path_text(name)}: not an image that can be read ({exc})") from None
    if (header.height, header.width) != tuple(size):
        raise MaskLabelError(f"{path_text(name)} is {header.width}x{header.height}, its photo {size[1]}x{size[0]}: a "
                             "label is the photo's size")
    mask = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise MaskLabelError(f"{path_text(name)}: not an image OpenCV can read")
    if mask.ndim == 3:
        if not all(np.array_equal(mask[..., 0], mask[..., c]) for c in range(1, min(mask.shape[2], 3))):
            raise MaskLabelError(f"{path_text(name)}: a colour image; a label is one channel (0/255, or class indices)")
        mask = mask[..., 0]
    values = set(np.unique(mask).tolist())
    return (mask > 0).astype(np.int32) if values <= {0, 255} else mask.astype(np.int32)


def label_result(mask: np.ndarray) -> np.ndarray:
    """A label as a result [2, H, W]: its matte the foreground as 0/1, its mask the classes."""
    return np.stack([(mask > 0).astype(np.float32), mask.astype(np.float32)])


@dataclass(frozen=True)
class Wilcoxon:
    """The Wilcoxon signed-rank test of the per-image IoU, a path against the reference."""

    differing: int
    """Images whose IoU differs from the reference's."""
    better: int
    """Of them, those where the path's IoU is higher."""
    p_value: float

    def to_dict(self) -> dict:
        return {"differing": self.differing, "better": self.better, "p_value": self.p_value}


def wilcoxon_iou(reference: np.ndarray, deployed: np.ndarray) -> Wilcoxon:
    from scipy.stats import wilcoxon

    diff = np.asarray(deployed, np.float64) - np.asarray(reference, np.float64)
    differing = int(np.count_nonzero(diff))
    p = float(wilcoxon(diff).pvalue) if differing else 1.0
    return Wilcoxon(differing, int((diff > 0).sum()), min(1.0, p))


@dataclass(frozen=True)
class PathMasks:
    path: str
    means: Mapping[str, float | None]
    """IoU, Dice, boundary F, matte error: each the mean over the evaluated images."""
    images: Mapping[str, Mapping[str, float | None]]
    """Image -> its figures against the label."""
    wilcoxon: Wilcoxon | None = None
    changes: Mapping[str, str] | None = None
    """Image -> ``diverged`` or ``tie`` where the mask differs from the reference's (None: the reference)."""

    def changed(self, ties: bool = True) -> int:
        return sum(ties or v != "tie" for v in (self.changes or {}).values())

    def to_dict(self) -> dict:
        return {"path": self.path, **{f"mean_{k}": v for k, v in self.means.items()},
                "wilcoxon_iou": self.wilcoxon.to_dict() if self.wilcoxon else None,
                "mask_changes": None if self.changes is None else dict(sorted(self.changes.items())),
                "images": {n: dict(f) for n, f in self.images.items()}}


@dataclass(frozen=True)
class SegmentationEffect:
    paths: tuple[PathMasks, ...]
    evaluated: tuple[str, ...]
    """The labeled images every path segmented: the only ones scored."""
    left_out: tuple[str, ...]
    """Images some path has no mask for (it failed there)."""
    unlabeled: Mapping[str, str]
    """Image -> why its label cannot be used (missing, unreadable, another size): error rows."""

    def to_dict(self, names: Sequence[str] | None = None) -> dict:
        return {"task": "segmentation", "evaluated": len(self.evaluated), "left_out": list(self.left_out),
                "unlabeled": dict(self.unlabeled), "paths": [p.to_dict() for p in self.paths]}

    def any_changes(self, ties: bool = True) -> bool:
        return any(p.changed(ties) for p in self.paths[1:])

    def cases(self, models: Sequence[str], ties_fail: bool, group: str) -> list:
        from harness.results.interface import Case, Status

        ref, out = self.paths[0], []
        for path, model in zip(self.paths[1:], models):
            changed = sorted(n for n, v in (path.changes or {}).items() if ties_fail or v != "tie")
            iou = f"; mean IoU {path.means['iou']:.4f} against the reference's {ref.means['iou']:.4f}" \
                if path.means.get("iou") is not None and ref.means.get("iou") is not None else ""
            reason = (f"masks changed on {len(changed)} of {len(self.evaluated)} images{iou}: " + ", ".join(changed[:10])
                      if changed else f"no mask change{iou}")
            out.append(Case(str(model), group, Status.FAILED if changed else Status.PASSED, reason,
                            "\n".join(f"{n}: {v}" for n, v in sorted((path.changes or {}).items()))))
        return out

    def markdown(self, names: Sequence[str] | None = None, shown: int = 50) -> list[str]:
        from harness.formatting import fmt
        from harness.names import markdown_code, markdown_row

        ref = self.paths[0]
        lines = [f"Masks against the labels over the {len(self.evaluated)} labeled images every path segmented: mean "
                 "IoU, Dice and boundary F (2 px) of the mask, and the matte's mean absolute error against the label "
                 "as 0/1. Wilcoxon: the signed-rank test of the per-image IoU against the reference's (images whose "
                 "IoU differs, of them better; p).", "",
                 "| path | mean IoU | IoU diff | Dice | boundary F | matte error | Wilcoxon (differ, better), p "
                 "| images whose mask changed |", "|---|" + "---:|" * 7]
        for p in self.paths:
            diff = "" if p is ref or p.means["iou"] is None or ref.means["iou"] is None \
                else f"{p.means['iou'] - ref.means['iou']:+.4f}"
            test = f"({p.wilcoxon.differing}, {p.wilcoxon.better}), {p.wilcoxon.p_value:.3g}" if p.wilcoxon else ""
            changed = "" if p.changes is None else f"{p.changed()} ({p.changed() - p.changed(ties=False)} ties)"
            lines.append(f"| {p.path} | {fmt(p.means['iou'])} | {diff} | {fmt(p.means['dice'])} | "
                         f"{fmt(p.means['boundary_f'])} | {fmt(p.means['matte_mae'])} | {test} | {changed} |")
        if self.unlabeled:
            lines += ["", f"Labels that cannot be used ({len(self.unlabeled)}; those images are not scored):", "",
                      "| image | why |", "|---|---|"]
            lines += [markdown_row(n, why) for n, why in sorted(self.unlabeled.items())[:shown]]
        if self.left_out:
            lines += ["", f"Left out ({len(self.left_out)}: some path has no mask there, it failed): "
                      + ", ".join(markdown_code(n) for n in self.left_out[:shown])]
        return lines


def evaluate_segmentation(masks: Path, images: Sequence[str] | Mapping[str, Path],
                          predictions: Sequence[tuple[str, Mapping[str, np.ndarray]]],
                          changes: Sequence[Mapping[str, str]] | None = None) -> SegmentationEffect:
    """Score each path (``(name, image -> result [2, H, W])``, the reference first) against the
    labels in ``masks`` on the ``images`` (names as reported; or name -> the photo's file, whose
    real name finds its label) every path segmented and whose label can be used."""
    files = images if isinstance(images, Mapping) else {name: Path(name) for name in images}
    images = list(files)
    unlabeled: dict[str, str] = {}
    labels: dict[str, np.ndarray] = {}
    left_out = []
    for name in images:
        found = [p[name] for _, p in predictions if name in p]
        if len(found) < len(predictions):
            left_out.append(name)
            continue
        try:
            labels[name] = load_mask(masks, files[name], tuple(np.asarray(found[0]).shape[-2:]))
        except MaskLabelError as exc:
            unlabeled[name] = str(exc)
    evaluated = tuple(n for n in images if n in labels)
    figures = {path: {n: _figures(labels[n], found[n]) for n in evaluated} for path, found in predictions}
    reference_iou = np.array([figures[predictions[0][0]][n]["iou"] for n in evaluated])
    paths = []
    for k, (path, _) in enumerate(predictions):
        rows = figures[path]
        means = {f: _mean([rows[n][f] for n in evaluated]) for f in FIGURES}
        iou = np.array([rows[n]["iou"] for n in evaluated])
        paths.append(PathMasks(path, means, rows, wilcoxon_iou(reference_iou, iou) if k and evaluated else None,
                               ({n: v for n, v in changes[k - 1].items() if n in labels} if changes else {}) if k
                               else None))
    return SegmentationEffect(tuple(paths), evaluated, tuple(left_out), unlabeled)


def _figures(label: np.ndarray, result: np.ndarray) -> dict[str, float | None]:
    result = np.asarray(result, np.float32)
    m = mask_metrics(label_result(label), result, 0.0)
    return {f: (None if m[f] is None else float(m[f])) for f in FIGURES}


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None
