"""The OCR recognizer's crop of one detected box (``[recognition]`` ``crop`` and ``rotate_ratio``):
the box cut out upright, then turned a quarter when it stands tall.

- ``crop = "perspective"``: PaddleOCR's ``get_rotate_crop_image``, a perspective warp to the
  box's longer edge lengths, bicubic, border replicated; ``"axis_aligned"``: the box's bounding
  rectangle (the port that skips the warp);
- the rotation rule: a crop at least ``rotate_ratio`` times higher than wide is turned 90
  degrees counterclockwise (``np.rot90``); 0: never.

Its geometry rule is :func:`crop_geometry` (the warp's matrix and the crop's size, the quarter
turn folded in), which the DALI kernel warps with; its kernels: ``opencv`` (:func:`crop_box`,
the reference's and the cpu profile's) and ``dali`` (``experimental.warp_perspective``, the ocr
models'). The ``[recognition]`` table is OCR's (:mod:`harness.ocr.recognition` registers it with
the spec), so this operation is not one of the image preprocessing's (:data:`harness.operations.OPERATIONS`).
"""

from __future__ import annotations

from typing import Any

from harness.operations.base import Key, Operation
from harness.stage import Stage

CROPS = ("perspective", "axis_aligned")
CROP = Key("recognition", "crop", "perspective", CROPS, "How a box is cut out: a perspective warp, or its bounding rectangle.")
ROTATE_RATIO = Key("recognition", "rotate_ratio", 1.5,
                   doc="A crop at least this many times higher than wide is turned upright; 0: never.")

CANDIDATES: dict[str, tuple[dict[str, Any], ...]] = {
    # culprit -> the values ports use, each a change of [recognition] tried as one hypothesis
    "axis-aligned crop vs perspective warp": tuple({CROP.name: crop} for crop in reversed(CROPS)),
    "rotation rule": ({ROTATE_RATIO.name: 0.0}, {ROTATE_RATIO.name: ROTATE_RATIO.default}),
}
"""The alternatives users get wrong (diagnose's hypotheses on the recognizer's crop)."""


def turns(height: int, width: int, p) -> bool:
    """The rotation rule: whether a crop of this size is turned upright."""
    return bool(p.rotate_ratio) and height / width >= p.rotate_ratio


def crop_geometry(quad, p, image_size: tuple[int, int]):
    """The warp that cuts one box out upright in one step, for a warp operator (DALI's
    ``warp_perspective``, pixel centres at integers as in OpenCV): (the 3x3 matrix from the
    image's pixels to the crop's, the crop's (height, width)). The quarter turn of a tall crop
    is folded into the matrix: the same source points as :func:`crop_box`'s warp then turn."""
    import cv2
    import numpy as np

    points = np.asarray(quad, np.float32).reshape(4, 2)
    if p.crop == "axis_aligned":
        (x0, y0), (x1, y1) = _bounds(points, image_size)
        matrix, height, width = np.array([[1, 0, -x0], [0, 1, -y0], [0, 0, 1]], np.float64), y1 - y0, x1 - x0
    else:
        width, height = _edges(points)
        target = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
        matrix = cv2.getPerspectiveTransform(points, target)
    if turns(height, width, p):  # np.rot90: (x, y) -> (y, width - 1 - x)
        matrix = np.array([[0, 1, 0], [-1, 0, width - 1], [0, 0, 1]], np.float64) @ matrix
        height, width = width, height
    return matrix, (int(height), int(width))


def _edges(points) -> tuple[int, int]:
    """get_rotate_crop_image's crop size of a quad: (width, height), the longer of each pair of edges."""
    import numpy as np

    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    return max(width, 1), max(height, 1)


def _bounds(points, image_size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The axis-aligned rectangle of a quad's pixels within the image: ((x0, y0), (x1, y1)), x1 > x0, y1 > y0."""
    import numpy as np

    h, w = image_size
    x0, y0 = np.clip(np.floor(points.min(axis=0)).astype(int), 0, [w - 1, h - 1])
    x1, y1 = np.clip(np.ceil(points.max(axis=0)).astype(int), [x0 + 1, y0 + 1], [w, h])
    return (int(x0), int(y0)), (int(x1), int(y1))


def describe(p) -> str:
    """The crop in words."""
    how = "perspective warp" if p.crop == "perspective" else "bounding rectangle"
    return how + (f", turned upright when {p.rotate_ratio:g} times taller than wide" if p.rotate_ratio else "")


OPERATION = Operation(
    "recognizer crop", Stage.CROP, (CROP, ROTATE_RATIO),
    hint=f"an axis-aligned crop vs a perspective warp ({CROP.path}), the rotation of tall boxes ({ROTATE_RATIO.path})",
    describe=lambda p, recipe: describe(p))


@OPERATION.kernel("opencv")
def crop_box(image, quad, p):
    """One box of ``image`` (HWC uint8) cut out upright (the word's ``crop`` stage)."""
    import cv2  # the backend's own library, imported where its kernel runs (the spec reads this module)
    import numpy as np

    points = np.asarray(quad, np.float32).reshape(4, 2)
    if p.crop == "axis_aligned":
        (x0, y0), (x1, y1) = _bounds(points, image.shape[:2])
        out = np.ascontiguousarray(image[y0:y1, x0:x1])
    else:
        width, height = _edges(points)
        target = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
        matrix = cv2.getPerspectiveTransform(points, target)
        out = cv2.warpPerspective(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE,
                                  flags=cv2.INTER_CUBIC)
    if turns(*out.shape[:2], p):
        out = np.ascontiguousarray(np.rot90(out))
    return out


@OPERATION.kernel("dali")
def warp(region, matrix, size):
    """The crop of a word's region (a DALI node): its :func:`crop_geometry` warp (``matrix``,
    moved to the region's corner) to ``size`` (height, width), bicubic, border replicated, pixel
    centres at integers as OpenCV's."""
    from nvidia.dali import fn, types  # the backend's own library, imported where its kernel runs

    return fn.experimental.warp_perspective(region, matrix=matrix, size=size, inverse_map=False, border_mode="replicate",
                                            interp_type=types.INTERP_CUBIC, pixel_origin="center")
