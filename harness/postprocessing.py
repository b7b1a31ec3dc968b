"""The postprocessings' parameters (detectors' ``db``, ``yolo``; segmentation's ``saliency``,
``argmax``): what a spec's ``[postprocess]`` table holds, one record per postprocessing, the
one place each key is declared.

A record declares each key (its default, what it means, how its values are checked) and the
values users get wrong (:attr:`DbParams.tried`: diagnose's result-step culprits, key ->
(culprit, the values tried)), and says which key is its score threshold (``score_threshold``:
what a near-threshold change is measured from). The spec reads them (:mod:`harness.spec`
validates a table when it loads one); the kernels take them (:mod:`harness.detection.db`,
:mod:`harness.detection.yolo`, :mod:`harness.segmentation.postprocess`: the reference's and the
served ``detect_postprocess``/``segment_postprocess`` models' code alike); diagnose tries
:func:`culprit_hypotheses`. Standard library only: the spec and the serving models import
this module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, Mapping

from harness.operations import resize_filter


@dataclass(frozen=True)
class DbParams:
    """Defaults: rapidocr 3.10.0's detector config (``config.yaml`` ``Det``), the settings the
    reference detector ships with."""

    thresh: float = 0.3
    """Binarization threshold of the probability map."""
    box_thresh: float = 0.5
    """A box is kept when the mean probability inside it reaches this (its score)."""
    unclip_ratio: float = 1.6
    """How far a kept box grows: offset distance = area * ratio / perimeter."""
    max_candidates: int = 1000
    """Contours considered, in OpenCV's order."""
    min_size: int = 3
    """Shorter side (map pixels) below which a candidate is dropped (``min_size + 2`` after unclip)."""
    use_dilation: bool = True
    """Dilate the binary map with a 2x2 kernel first (rapidocr's config: true)."""
    score_mode: Literal["fast", "slow"] = "fast"
    """``fast``: mean inside the rectangle; ``slow``: inside the contour itself."""
    output: str | None = None
    """The probability map's output name; None: the model's only output."""
    box_type: Literal["quad", "rect"] = "quad"
    """``quad``: each word's rotated rectangle (PaddleOCR's); ``rect``: the axis-aligned box
    enclosing it, as a deployment answering boxes [N, 4] (x1, y1, x2, y2) keeps them: a rotated
    quad compared with an axis-aligned box differs by the rotation alone."""

    tried: ClassVar = {
        # the values PaddleOCR's configs and ports use, on a grid fine enough that the nearest
        # candidate moves a word's corners by less than the close rule's 4 px
        "unclip_ratio": ("DB unclip ratio", tuple(round(1.2 + 0.1 * k, 1) for k in range(14))),
        "box_thresh": ("DB box score threshold", (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8)),
        "thresh": ("DB binarization threshold", (0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)),
        "use_dilation": ("DB dilation", (True, False)),
        "box_type": ("DB box type", ("quad", "rect")),
        "score_mode": ("DB score mode", ("fast", "slow"))}
    """Diagnose's culprits among the keys: key -> (culprit, the values tried)."""

    def __post_init__(self):
        if not 0 <= self.thresh <= 1 or not 0 <= self.box_thresh <= 1:
            raise ValueError(f"db thresh and box_thresh are probabilities (got {self.thresh}, {self.box_thresh})")
        if self.unclip_ratio <= 0 or self.max_candidates <= 0 or self.min_size < 0:
            raise ValueError("db unclip_ratio and max_candidates must be positive, min_size not negative")
        if self.score_mode not in ("fast", "slow"):
            raise ValueError(f"db score_mode must be 'fast' or 'slow', not {self.score_mode!r}")
        if self.box_type not in ("quad", "rect"):
            raise ValueError(f"db box_type must be 'quad' or 'rect', not {self.box_type!r}")

    @property
    def score_threshold(self) -> float:
        """The score a box needs to be kept (what a near-threshold change is measured from)."""
        return self.box_thresh

@dataclass(frozen=True)
class YoloParams:
    """Defaults: ultralytics' documented prediction defaults (conf 0.25, max 300 boxes), with
    YOLOv5's NMS IoU 0.45."""

    layout: Literal["v5", "v8"] = "v8"
    conf_threshold: float = 0.25
    """A box is a candidate when its score exceeds this."""
    iou_threshold: float = 0.45
    """NMS suppresses a box whose IoU with a better one of its class exceeds this."""
    nms: Literal["torchvision", "opencv"] = "torchvision"
    class_agnostic: bool = False
    """True: one NMS over every class (default: per class)."""
    max_det: int = 300
    output: str | None = None
    """The head's output name; None: the model's only output."""

    tried: ClassVar = {  # ultralytics' and YOLOv5's defaults and the values exports bake into EfficientNMS
        "iou_threshold": ("NMS IoU threshold", (0.45, 0.5, 0.6, 0.65, 0.7)),
        "conf_threshold": ("confidence threshold", (0.001, 0.1, 0.25, 0.3, 0.4, 0.5)),
        "class_agnostic": ("class-agnostic NMS", (False, True)),
        "nms": ("NMS implementation", ("torchvision", "opencv"))}
    """Diagnose's culprits among the keys: key -> (culprit, the values tried)."""

    def __post_init__(self):
        if self.layout not in ("v5", "v8"):
            raise ValueError(f"yolo layout must be 'v5' or 'v8', not {self.layout!r}")
        if self.nms not in ("torchvision", "opencv"):
            raise ValueError(f"yolo nms must be 'torchvision' or 'opencv', not {self.nms!r}")
        if not 0 <= self.conf_threshold <= 1 or not 0 <= self.iou_threshold <= 1 or self.max_det <= 0:
            raise ValueError("yolo conf_threshold and iou_threshold must be in [0, 1], max_det positive")

    @property
    def score_threshold(self) -> float:
        return self.conf_threshold


SEGMENTATION_INTERPOLATIONS = tuple(resize_filter.PIL)
"""How a segmentation map goes back to the source size (PIL's filters: NEAREST, BILINEAR,
BICUBIC, LANCZOS, BOX; each low-passed when shrinking, as PIL's always are)."""

MAX_OUTPUT_PIXELS = 2 ** 25
"""A segmentation's default ceiling on the source size it answers at (33.5 megapixels: a
24-megapixel camera photo is answered in full, its matte and mask 120 MB; one at the decode
limit, 179 megapixels, would be 895 MB and take the server 4 GB): a larger photo is refused by
name (docs/robustness.md)."""


@dataclass(frozen=True)
class SaliencyParams:
    """A saliency map [1, H, W] (a background-removal model's, already a sigmoid) to a matte and
    a binary mask at the source size. Defaults: rembg's own (``session_simple.py``): min-max
    rescale, to uint8 (truncated), LANCZOS back to the source size; the mask is the matte
    above half."""

    minmax: bool = True
    """Rescale the map to [0, 1] by its own minimum and maximum (rembg does); a flat map is all 0."""
    interpolation: str = "lanczos"
    """How the matte goes back to the source size."""
    threshold: float = 0.5
    """A pixel is in the mask when its matte value (0 to 1) exceeds this."""
    threshold_after_upsampling: bool = True
    """True: threshold the upsampled matte; False: threshold the map at the model's resolution
    and upsample the binary mask (nearest)."""
    output: str | None = None
    """The map's output name; None: the model's only output."""
    max_output_pixels: int = MAX_OUTPUT_PIXELS
    """The most pixels the matte and mask are answered at: a larger source is refused by name."""

    tried: ClassVar = {
        "minmax": ("min-max rescale of the map", (True, False)),
        "threshold_after_upsampling": ("threshold before or after upsampling", (True, False)),
        "interpolation": ("the upsampling's interpolation", ("lanczos", "linear", "cubic", "nearest", "area")),
        "threshold": ("the mask's threshold", (0.3, 0.4, 0.5, 0.6, 0.7))}
    """Diagnose's culprits among the keys: key -> (culprit, the values tried)."""

    def __post_init__(self):
        _check_max_output(self.max_output_pixels)
        if self.interpolation not in SEGMENTATION_INTERPOLATIONS:
            raise ValueError(f"saliency interpolation must be one of {', '.join(SEGMENTATION_INTERPOLATIONS)}, "
                             f"not {self.interpolation!r}")
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"saliency threshold is a probability (got {self.threshold})")

    @property
    def score_threshold(self) -> float:
        return self.threshold


@dataclass(frozen=True)
class ArgmaxParams:
    """C-class logits [C, H, W] to a class-index mask at the source size (the matte: the
    probability of the winning class, softmax over the classes)."""

    interpolation: str = "linear"
    """How the logits (or the class mask, nearest) go back to the source size."""
    threshold_after_upsampling: bool = True
    """True: upsample the logits, then the argmax; False: the argmax at the model's
    resolution, the class mask upsampled (nearest)."""
    output: str | None = None
    max_output_pixels: int = MAX_OUTPUT_PIXELS
    """The most pixels the matte and mask are answered at: a larger source is refused by name."""

    tried: ClassVar = {
        "threshold_after_upsampling": ("argmax before or after upsampling", (True, False)),
        "interpolation": ("the upsampling's interpolation", ("linear", "nearest", "cubic", "lanczos", "area"))}
    """Diagnose's culprits among the keys: key -> (culprit, the values tried)."""

    def __post_init__(self):
        _check_max_output(self.max_output_pixels)
        if self.interpolation not in SEGMENTATION_INTERPOLATIONS:
            raise ValueError(f"argmax interpolation must be one of {', '.join(SEGMENTATION_INTERPOLATIONS)}, "
                             f"not {self.interpolation!r}")

    @property
    def score_threshold(self) -> float:
        return 0.5  # two classes: the winning probability's tie point


def _check_max_output(pixels) -> None:
    if isinstance(pixels, bool) or not isinstance(pixels, int) or pixels < 1:
        raise ValueError(f"max_output_pixels is a whole number of pixels above 0 (got {pixels!r})")


PARAMETERS = {"db": DbParams, "yolo": YoloParams, "saliency": SaliencyParams, "argmax": ArgmaxParams}
"""A built-in postprocessing's name -> its parameter record."""


def parameters(table: Mapping[str, Any]):
    """The parameter record a ``[postprocess]`` table describes (``name`` and its parameters;
    unknown names and keys refused by name, so a typo is not silently a default)."""
    table = dict(table)
    name = table.pop("name", None)
    if name not in PARAMETERS:
        raise ValueError(f"[postprocess] name must be one of {', '.join(PARAMETERS)} (or FILE.py:NAME), not {name!r}")
    record = PARAMETERS[name]
    known = {f.name for f in fields(record)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"[postprocess] {name} has no parameter {', '.join(unknown)}; it has {', '.join(sorted(known))}")
    return record(**{k: tuple(v) if isinstance(v, list) else v for k, v in table.items()})


def output_ceiling(table: Mapping[str, Any] | None) -> int | None:
    """The most source pixels a deployed ``[postprocess]`` table answers at (a segmentation's
    ``max_output_pixels``), or None where it sets no such ceiling (a detector's, a user's
    ``FILE.py:NAME``, none): what a pipeline's first step checks from the image's header."""
    if not table or table.get("name") not in PARAMETERS:
        return None
    return getattr(parameters(table), "max_output_pixels", None)


def culprit_hypotheses(reference: Mapping[str, Any] | None, deployed: Mapping[str, Any] | None,
                       postprocessings: tuple[str, ...]) -> list:
    """Every value tried of the reference's ``[postprocess]`` table, one key at a time (its
    record's :attr:`~DbParams.tried`; the deployed spec's value of a key among them), and the
    deployed spec's whole table where it differs in several keys: what diagnose tries as the
    result step's culprits (:class:`harness.task_api.ResultCulprit`), for a reference of one of
    ``postprocessings`` (a task's). None for a user's ``--postprocess``."""
    from harness.task_api import ResultCulprit  # here: at import this module needs only the standard library (the spec's)

    if not reference or reference.get("name") not in postprocessings:
        return []
    params = parameters(reference)
    deployed = deployed if deployed and deployed.get("name") == reference["name"] else {}  # another kind: no values
    out = []
    for key, (culprit, values) in PARAMETERS[reference["name"]].tried.items():
        before = getattr(params, key)
        mine = deployed.get(key)
        for value in dict.fromkeys((*values, *([mine] if mine is not None else ()))):
            if value != before:
                out.append(ResultCulprit(f"{key.replace('_', ' ')} {value}", culprit, ((key, before, value),)))
    if deployed and dict(deployed) != dict(reference):
        changed = tuple((k, getattr(params, k), v) for k, v in deployed.items() if k != "name" and getattr(params, k) != v)
        if len(changed) > 1:
            out.append(ResultCulprit("the deployed spec's postprocessing", "postprocessing parameters", changed))
    return out
