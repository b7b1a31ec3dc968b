"""Visuals of the worst images per stage: small difference heat maps and side-by-side crops,
kept on disk for the few worst images only (bounded memory and disk)."""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from harness.check.files import write_npz
from harness.check.image import ImageTensors
from harness.compare.aggregate import severity
from harness.names import bounded_filename
from harness.result import ImageResult
from harness.segmentation.draw import draw_masks
from harness.stage import IMAGE_STAGES, STAGES, Stage
from harness.verdict import Verdict

VISUAL_SIDE = 256
"""Heat maps are downsampled to at most this many pixels a side: the report needs the
pattern of the difference (edges, borders, blocks), not every pixel."""
BOXES_SIDE = 720
"""A photo with boxes drawn on it is shrunk to at most this many pixels a side (a word's box
stays visible)."""


def boxes_visual(t: ImageTensors) -> dict[str, np.ndarray] | None:
    """A detector's result: both sides' boxes drawn on the decoded photo, reference blue, deployed orange."""
    import cv2

    from harness.detection.boxes import Detections  # here: loads shapely only when called
    from harness.detection.draw import draw_comparison  # here: loads shapely only when called

    ref, dep, photo = t.reference.get(Stage.POSTPROCESS), t.deployed.get(Stage.POSTPROCESS), t.reference.get(Stage.DECODE)
    if ref is None or dep is None or photo is None:
        return None
    words = "TEXTS"  # an OCR pipeline's words (harness.ocr.tensors.TEXTS), written at their boxes
    texts = (list(t.reference[words]), list(t.deployed[words])) if words in t.reference and words in t.deployed else None
    drawn = draw_comparison(np.asarray(photo, np.uint8), Detections.from_array(ref), Detections.from_array(dep),
                            texts=texts)
    scale = BOXES_SIDE / max(drawn.shape[:2])
    if scale < 1:
        drawn = cv2.resize(drawn, (round(drawn.shape[1] * scale), round(drawn.shape[0] * scale)),
                           interpolation=cv2.INTER_AREA)
    return {"boxes": drawn}


def masks_visual(t: ImageTensors) -> dict[str, np.ndarray] | None:
    """A segmenter's result ([2, H, W]: matte and mask at the photo's size): both masks' contours
    drawn on the decoded photo, the flipped pixels marked (:mod:`harness.segmentation.draw`)."""
    import cv2


    ref, dep, photo = t.reference.get(Stage.POSTPROCESS), t.deployed.get(Stage.POSTPROCESS), t.reference.get(Stage.DECODE)
    if ref is None or dep is None or photo is None or ref.shape != dep.shape:
        return None
    drawn = draw_masks(np.asarray(photo, np.uint8), ref[1], dep[1])
    scale = BOXES_SIDE / max(drawn.shape[:2])
    if scale < 1:
        drawn = cv2.resize(drawn, (round(drawn.shape[1] * scale), round(drawn.shape[0] * scale)),
                           interpolation=cv2.INTER_AREA)
    return {"masks": drawn}


def _is_mask(result, photo) -> bool:
    """A segmenter's result: [2, H, W] at the decoded photo's size (a detector's is [N, ...] boxes)."""
    return (result is not None and photo is not None and np.ndim(result) == 3 and np.shape(result)[0] == 2
            and tuple(np.shape(result)[1:]) == tuple(np.shape(photo)[:2]))


def visual_arrays(stage: Stage, t: ImageTensors) -> dict[str, np.ndarray] | None:
    """Small arrays to draw for one stage: a |difference| heat map, for the crop stage the
    two crops side by side, for a detector's result the boxes drawn on the photo, for a
    segmenter's both masks' contours."""
    if stage is Stage.POSTPROCESS:  # in the tensors only where the task makes boxes or masks
        if _is_mask(t.reference.get(Stage.POSTPROCESS), t.reference.get(Stage.DECODE)):
            return masks_visual(t)
        return boxes_visual(t)
    ref, dep = t.reference.get(stage), t.deployed.get(stage)
    if ref is None or dep is None or ref.shape != dep.shape or stage not in (*IMAGE_STAGES, Stage.INPUT):
        return None
    # Every step-th pixel, taken before the difference: the same heat map as subsampling the
    # whole difference, without holding a float copy of a decoded image (4 bytes a value).
    spatial = ref.shape[1:] if stage == Stage.INPUT else ref.shape[:2]
    step = max(1, int(np.ceil(max(spatial) / VISUAL_SIDE)))
    window = (slice(None), slice(None, None, step), slice(None, None, step)) if stage == Stage.INPUT else (
        slice(None, None, step), slice(None, None, step))
    diff = np.abs(dep[window].astype(np.float32) - ref[window].astype(np.float32))
    diff = diff.mean(axis=0) if stage == Stage.INPUT else diff.mean(axis=2)
    out = {"diff": diff.astype(np.float16)}
    if stage == Stage.CROP:
        out["reference"] = np.clip(ref, 0, 255).astype(np.uint8)
        out["deployed"] = np.clip(dep, 0, 255).astype(np.uint8)
    return out


class VisualStore:
    """Keeps, on disk, the visuals of the few worst images per stage (bounded memory/disk)."""

    def __init__(self, directory: Path, keep: int = 3):
        self.directory, self.keep = directory, keep
        self.heaps: dict[Stage, list[tuple[float, str]]] = {s: [] for s in STAGES}
        directory.mkdir(parents=True, exist_ok=True)  # (the run directory refused a link here)

    def path(self, stage: Stage, image: str) -> Path:
        """A bounded, unique file name per stage and image (:func:`harness.names.bounded_filename`)."""
        return self.directory / bounded_filename(image, ".npz", prefix=f"{stage}__")

    def offer(self, result: ImageResult, tensors: ImageTensors | None) -> None:
        for stage_result in result.stages:
            if stage_result.verdict is Verdict.EQUAL:
                continue  # nothing differs: a heat map would be one flat colour
            heap, score = self.heaps[stage_result.stage], severity(stage_result)
            if len(heap) >= self.keep and score <= heap[0][0]:
                continue
            arrays = visual_arrays(stage_result.stage, tensors) if tensors else None
            if arrays is None and tensors is not None:
                continue
            if tensors is not None:
                write_npz(self.path(stage_result.stage, result.image), arrays)
            elif not self.path(stage_result.stage, result.image).exists():
                continue  # resumed result whose visual was evicted before
            heapq.heappush(heap, (score, result.image))
            if len(heap) > self.keep:
                _, evicted = heapq.heappop(heap)
                self.path(stage_result.stage, evicted).unlink(missing_ok=True)

    def worst(self, stage: Stage) -> list[tuple[str, Path]]:
        return [(image, self.path(stage, image)) for _, image in sorted(self.heaps[stage], reverse=True)]
