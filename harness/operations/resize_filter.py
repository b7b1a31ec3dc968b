"""The resize filter as one decision: ``[resize] interpolation`` with its ``antialias`` and its
``resampling`` (how PIL applies the filter), as every library names them together: PIL's
LANCZOS antialiases, ``cv2.INTER_LINEAR`` cannot, torchvision's tensors have no Lanczos without
PIL's resampling, DALI has no area filter.

Its kernels resample an image to a given size (the resize mode decides the size); its
refusals say which filters each library has, for serving a spec and for diagnose alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.operations.base import Alternative, Key, Operation
from harness.stage import Stage

NAMES = {
    # spec name: (OpenCV's cv2 constant, DALI's types constant, torchvision's InterpolationMode, PIL's filter)
    "nearest": ("INTER_NEAREST", "INTERP_NN", "NEAREST", "NEAREST"),
    "linear": ("INTER_LINEAR", "INTERP_LINEAR", "BILINEAR", "BILINEAR"),
    "cubic": ("INTER_CUBIC", "INTERP_CUBIC", "BICUBIC", "BICUBIC"),
    "area": ("INTER_AREA", None, None, "BOX"),
    "lanczos": ("INTER_LANCZOS4", "INTERP_LANCZOS3", "LANCZOS", "LANCZOS"),
}
"""Each interpolation as each library names it (None: the library has no such filter)."""
INTERPOLATIONS = tuple(NAMES)
CV2, DALI, TORCHVISION, PIL = ({name: names[i] for name, names in NAMES.items() if names[i] is not None} for i in range(4))
PIL_CODES = {"NEAREST": 0, "LANCZOS": 1, "BILINEAR": 2, "BICUBIC": 3, "BOX": 4}
"""PIL's ``Image.Resampling`` values (what Hugging Face's ``resample`` holds)."""
SUPPORT = {"linear": 1.0, "cubic": 2.0, "lanczos": 3.0}
"""The filters PIL resamples with (``resampling = "pil"``) and their support, in source pixels at a
scale of 1 (PIL's ``filter.support``)."""
PIL_FILTERS = tuple(SUPPORT)
RESAMPLINGS = ("auto", "pil")
AVERAGING = ("area", "lanczos")
"""The interpolations OpenCV's resize can antialias with: ``area`` averages when shrinking;
``lanczos`` is resized by PIL, whose filters always antialias."""

INTERPOLATION = Key("resize", "interpolation", "linear", INTERPOLATIONS, "The resize filter.")
ANTIALIAS = Key("resize", "antialias", False, doc="Low-pass filter when scaling down.")
RESAMPLING = Key("resize", "resampling", "auto", RESAMPLINGS, "How the filter is applied: the library's own, or PIL's.",
                 omitted_at_default=True)


@dataclass(frozen=True)
class Filter:
    """A filter the code fixes, not a spec: what the kernels read of a spec's ``[resize]`` table,
    so that it is handed to a backend's kernel in its place (a detector's resize and the
    recognizer's, as rapidocr and YOLO train them; torchvision's training crop)."""

    interpolation: str = INTERPOLATION.default
    antialias: bool = ANTIALIAS.default
    resampling: str = RESAMPLING.default
    dtype: str = "uint8"
    """The kernel's output type (``float32``: fractions kept)."""
    for_detector: bool = False


CV2_DEFAULT = Filter("linear", antialias=False)
"""``cv2.resize``'s own: bilinear, no low-pass (rapidocr's and YOLO's detector resizes and
PaddleOCR's recognizer; DALI's kernel within one level of it on uint8)."""
TORCHVISION_DEFAULT = Filter("linear", antialias=True)
"""torchvision's own for its resizing transforms (``RandomResizedCrop``): bilinear, low-pass on."""


def pil_pass(interpolation: str) -> Filter:
    """One axis of PIL's resampling as DALI replays it (:mod:`harness.preprocessing.dali_pil`):
    the filter low-passed (PIL always filters), in float."""
    return Filter(interpolation, antialias=True, dtype="float32")


def _invalid(p) -> str | None:
    r = p.resize
    if r.resampling == "pil" and (not r.antialias or r.interpolation not in PIL_FILTERS):
        return (f"{RESAMPLING.path} = \"pil\" is PIL's filtered resize: it needs {ANTIALIAS.path} = true and "
                f"{INTERPOLATION.path} one of {', '.join(PIL_FILTERS)}")
    return None


ANTIALIAS_ALONE, INTERPOLATION_ALONE = "resize antialias", "resize interpolation"
"""The culprits of the filter's halves, where an alternative changes one alone (both: ``resize filter``)."""


def _alternatives(recipe: str, ref, deployed) -> list[Alternative]:
    """Every other (interpolation, antialias) pair, each one alternative setting what it changes:
    the antialias alone first (the commonest port bug), then the interpolation alone, then both.
    For OpenCV training, which cannot antialias a linear resize, the antialiased resize ports
    meet is PIL's (torchvision's), right after the antialias."""
    r = ref.resize
    alone = [(r.interpolation, not r.antialias)] + [(i, r.antialias) for i in INTERPOLATIONS if i != r.interpolation]
    both = [(i, not r.antialias) for i in INTERPOLATIONS if i != r.interpolation]
    out = []
    for interpolation, antialias in alone + both:
        aa = "on" if antialias else "off"
        if interpolation == r.interpolation:
            name, culprit = f"antialias {aa}", ANTIALIAS_ALONE
        elif antialias == r.antialias:
            name, culprit = f"interpolation {interpolation}", INTERPOLATION_ALONE
        else:
            name, culprit = f"interpolation {interpolation}, antialias {aa}", "resize filter"
        changed = {k.name: v for k, v in ((INTERPOLATION, interpolation), (ANTIALIAS, antialias))
                   if v != getattr(r, k.name)}
        out.append(Alternative(name, culprit, {"resize": changed}))
    if recipe == "opencv" and not r.antialias and r.interpolation != "area":
        out.insert(1, Alternative("antialias on (PIL's resize, as torchvision)", ANTIALIAS_ALONE,
                                  ANTIALIAS.table_of(True), recipe="torchvision"))
    return out


def describe(p, recipe: str) -> str:
    r = p.resize
    return f"{r.interpolation}, {'antialias' if r.antialias else 'no antialias'}, {recipe} on {r.dtype}"


OPERATION = Operation(
    "resize filter", Stage.RESIZE, (INTERPOLATION, ANTIALIAS, RESAMPLING), hint="interpolation, antialias",
    alternatives=_alternatives, describe=describe, invalid=_invalid,
    partners=((ANTIALIAS_ALONE, INTERPOLATION_ALONE),))  # where a catalogue offers the filter's halves apart


def _opencv_refuses(p) -> str | None:
    r = p.resize
    if r.antialias and r.interpolation not in AVERAGING:
        return (f"cv2.resize cannot antialias with interpolation '{r.interpolation}': set {ANTIALIAS.path} = false, "
                "or interpolation = \"area\" (which averages when shrinking)")
    if r.resampling == "pil" and not (r.interpolation == "lanczos" and r.dtype == "uint8"):
        return (f"cv2.resize has no PIL resampling (taps renormalized at the edges, an 8-bit intermediate): set "
                f"{RESAMPLING.path} = \"auto\"")
    return None


@OPERATION.kernel("opencv", refuses=_opencv_refuses)
def _opencv(image, size: tuple[int, int], r):
    """HWC -> HWC of ``size`` (height, width) by the spec's ``[resize]`` ``r``; float32 input or
    ``dtype = "float32"`` keeps fractions."""
    import cv2  # the backend's own library, imported where its kernel runs (the spec reads this module)
    import numpy as np

    height, width = size
    if r.interpolation == "lanczos" and r.antialias and image.dtype == np.uint8 and r.dtype == "uint8":
        # cv2's LANCZOS4 does not antialias; PIL's LANCZOS does (what rembg trains with)
        from PIL import Image

        return np.asarray(Image.fromarray(image).resize((width, height), Image.LANCZOS))
    if r.dtype == "float32":
        image = image.astype(np.float32)
    return cv2.resize(image, (width, height), interpolation=getattr(cv2, CV2[r.interpolation]))


def _torch_refuses(force: bool):
    def refuses(p) -> str | None:
        r = p.resize
        if r.interpolation not in TORCHVISION:
            return f"torchvision has no '{r.interpolation}' interpolation; use one of {', '.join(TORCHVISION)}"
        if on_tensor(p, force) and r.interpolation == "lanczos" and r.resampling != "pil":  # v2's has it
            return f"torchvision resizes tensors without lanczos; set {ANTIALIAS.path} = true to use PIL"
        return None

    return refuses


def mode(r):
    """torchvision's ``InterpolationMode`` of a ``[resize]``'s interpolation."""
    from torchvision.transforms import InterpolationMode

    return InterpolationMode[TORCHVISION[r.interpolation]]


@OPERATION.kernel("torchvision", refuses=_torch_refuses(force=False))
@OPERATION.kernel("torch", refuses=_torch_refuses(force=True))
def _torch(image, size, r):
    """A PIL image or a CHW tensor -> resized to ``size`` (torchvision's: one side for the shorter
    side, else height and width); PIL's resampling on a uint8 tensor is torchvision v2's kernel."""
    import torch

    if r.resampling == "pil" and isinstance(image, torch.Tensor) and not r.for_detector:
        # torchvision v2's kernel on uint8 tensors follows PIL (its 8-bit intermediate too); v1's
        # goes through float (a cubic overshoot then clips once: up to 14 levels apart)
        from torchvision.transforms.v2 import functional as F2

        return F2.resize(image, size, **torchvision_arguments(r))
    from torchvision.transforms import functional as F

    return F.resize(image, size, **torchvision_arguments(r))


def torchvision_arguments(r) -> dict[str, Any]:
    """A ``[resize]`` table's (or a :class:`Filter`'s) filter as torchvision's resizing functions and
    transforms take it."""
    return {"interpolation": mode(r), "antialias": r.antialias}


@OPERATION.kernel("dali", refuses=lambda p: None if p.resize.interpolation in DALI else (
        f"DALI's resize has no '{p.resize.interpolation}' interpolation; use one of {', '.join(DALI)}"))
def _dali(image, extent: dict[str, Any], r):
    """``fn.resize`` to ``extent`` (``resize_x``/``resize_y`` or ``resize_shorter``, and any region
    of the source: ``roi_start``/``roi_end``)."""
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs
    import nvidia.dali.types as types

    return fn.resize(
        image,
        **extent,
        interp_type=dali_type(r.interpolation),
        antialias=r.antialias,
        # DALI's default keeps the exact scale factor and shifts the source window when
        # the output size is rounded; cv2, PIL and torchvision map the whole source onto
        # the rounded size. That alone moves pixels by up to ~70 levels, so match them.
        subpixel_scale=False,
        dtype=types.FLOAT if r.dtype == "float32" else types.UINT8,
    )


def dali_type(interpolation: str):
    """DALI's ``types.INTERP_*`` of an interpolation."""
    import nvidia.dali.types as types

    return getattr(types, DALI[interpolation])


def on_tensor(p, force: bool = False) -> bool:
    """Whether torchvision resizes a tensor, not a PIL image: PIL always filters when shrinking,
    so a resize without the antialias (or on float) goes through a tensor, where torchvision
    honours it; ``force``: the ``torch`` recipe's tensors always."""
    return force or not p.resize.antialias or p.resize.dtype == "float32"


def arguments(p) -> str:
    """The filter as a recipe's description writes its arguments (``linear, antialias=True``)."""
    return f"{p.resize.interpolation}, antialias={p.resize.antialias}"


def table(interpolation: str, antialias: bool = True, pil: bool | None = None) -> dict[str, Any]:
    """The ``[resize]`` filter keys of a training definition read (:mod:`harness.reference.frameworks`):
    PIL's resampling where ``pil`` (by default: an antialiased PIL filter, as PIL resizes)."""
    pil = antialias and interpolation in PIL_FILTERS if pil is None else pil
    return {INTERPOLATION.name: interpolation, ANTIALIAS.name: antialias, RESAMPLING.name: "pil" if pil else "auto"}


def of_torchvision(transform: Any, interpolation: str, image: str, version2: bool) -> dict[str, Any]:
    """The ``[resize]`` filter keys of a torchvision ``Resize`` (v2 where ``version2``) given
    ``image`` (``pil``, or a ``uint8`` or ``float`` tensor): PIL's filter on a PIL image (it
    always low-passes); on a tensor the transform's own switch (on by torchvision's default),
    resampled as PIL does where torchvision follows PIL (v2 on uint8, any float resize; not nearest)."""
    antialias = True if image == "pil" else bool(getattr(transform, ANTIALIAS.name, True))
    pil = antialias and interpolation != "nearest" and (image != "uint8" or version2)
    return table(interpolation, antialias, pil)
