"""harness/geometry.py: the limit-side resize against rapidocr's own, the letterbox
against YOLO's documented rule, and the back-mapping of points, on real photos."""

from __future__ import annotations

import random

import cv2
import numpy as np
import pytest
from rapidocr.ch_ppocr_det.utils import DetPreProcess

from harness.geometry import Geometry, GeometryError, Letterbox, LimitSide, letterbox_geometry, limit_side_geometry, resize_opencv
from tests.detection.conftest import CLEAN_PHOTOS


def yolo_letterbox(image, new_shape=(640, 640), color=(114, 114, 114), auto=False, scaleup=True, center=True, stride=32):
    """YOLO's letterbox as its documentation writes the rule (ultralytics' ``LetterBox``; no
    ultralytics import: AGPL): the oracle the harness's geometry is held to."""
    shape = image.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:
        r = min(r, 1.0)
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if auto:
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)
    if center:
        dw /= 2
        dh /= 2
    if shape[::-1] != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)) if center else 0, int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)) if center else 0, int(round(dw + 0.1))
    return cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=color), (top, bottom, left, right)


def sizes(count=400, seed=0):
    rng = random.Random(seed)
    return [(rng.randint(1, 2000), rng.randint(1, 2000)) for _ in range(count)] + [(375, 500), (500, 375), (736, 736), (17, 3000)]


@pytest.mark.parametrize("limit", [LimitSide(736, "min"), LimitSide(480, "max"), LimitSide(960, "max"), LimitSide(320, "min")])
def test_limit_side_sizes_are_rapidocrs(limit):
    reference = DetPreProcess(limit.limit_side_len, limit.limit_type)
    checked = 0
    for h, w in sizes(150):
        expected = reference.resize(np.zeros((h, w, 1), np.uint8))
        if expected is None:  # rapidocr gives up on an image that rounds to nothing
            with pytest.raises(GeometryError, match="too thin"):
                limit_side_geometry(h, w, limit)
            continue
        g = limit_side_geometry(h, w, limit)
        assert g.resized == expected.shape[:2] and g.input == g.resized and g.pad == (0, 0, 0, 0), (h, w)
        checked += 1
    assert checked > 100


def test_limit_side_pixels_are_rapidocrs_on_real_photos(sample):
    for name in CLEAN_PHOTOS[:4]:
        bgr = cv2.imread(str(sample / name))
        for limit in (LimitSide(736, "min"), LimitSide(480, "max")):
            ours, _ = resize_opencv(bgr, limit)
            assert np.array_equal(ours, DetPreProcess(limit.limit_side_len, limit.limit_type).resize(bgr))


def paddleocr_det_resize(h: int, w: int, limit_side_len: int, limit_type: str, max_side_limit: int) -> tuple[int, int]:
    """PaddleOCR 3.x ``DetResizeForTest.resize_image_type0`` as it is written there (the cap on
    the longer side, truncated again, then rounded to 32 with a floor of 32), the oracle of the
    spec's ``max_side_limit``."""
    if limit_type == "max":
        ratio = float(limit_side_len) / max(h, w) if max(h, w) > limit_side_len else 1.0
    else:
        ratio = float(limit_side_len) / min(h, w) if min(h, w) < limit_side_len else 1.0
    resize_h, resize_w = int(h * ratio), int(w * ratio)
    if max(resize_h, resize_w) > max_side_limit:
        ratio = float(max_side_limit) / max(resize_h, resize_w)
        resize_h, resize_w = int(resize_h * ratio), int(resize_w * ratio)
    return max(int(round(resize_h / 32) * 32), 32), max(int(round(resize_w / 32) * 32), 32)


def test_the_max_side_limit_is_paddleocrs_cap():
    limit = LimitSide(736, "min", max_side_limit=2048)
    checked = 0
    for h, w in sizes(300) + [(3000, 4000), (120, 411), (4032, 3024)]:
        expected = paddleocr_det_resize(h, w, 736, "min", 2048)
        try:
            g = limit_side_geometry(h, w, limit)
        except GeometryError:  # PaddleOCR floors a side at 32 where the spec (rapidocr) refuses it: thin strips only
            assert min(expected) == 32, (h, w)
            continue
        assert g.resized == expected and max(g.input) <= 2048, (h, w)
        checked += 1
    assert checked > 250 and limit_side_geometry(3000, 4000, limit).resized == (1536, 2048)


@pytest.mark.parametrize("box", [
    Letterbox(),
    Letterbox((640, 640), auto=True),
    Letterbox((384, 640), scaleup=False),
    Letterbox((640, 640), pad_position="top_left"),
    Letterbox((320, 480), pad_position="top_left", auto=True, stride=64),
])
def test_letterbox_is_yolos_rule(box):
    for h, w in sizes(300, seed=1):
        g = letterbox_geometry(h, w, box)
        r = min(box.size[0] / h, box.size[1] / w)
        r = r if box.scaleup else min(r, 1.0)
        assert g.resized == (max(1, int(round(h * r))), max(1, int(round(w * r))))
        if g.resized != (h, w) and min(g.resized) >= 1 and h * w < 400_000:
            _, pad = yolo_letterbox(np.zeros((h, w, 3), np.uint8), box.size, auto=box.auto, scaleup=box.scaleup,
                                    center=box.pad_position == "center", stride=box.stride)
            assert g.pad == pad, (h, w)
        if box.auto:  # padded only within the stride: the target's remainder, less than a stride added
            assert all((i - t) % box.stride == 0 for i, t in zip(g.input, box.size))
            assert all(0 <= i - r < box.stride for i, r in zip(g.input, g.resized))
        else:
            assert g.input == box.size


def test_letterbox_pixels_are_yolos_on_real_photos(sample):
    for name in CLEAN_PHOTOS[:4]:
        bgr = cv2.imread(str(sample / name))
        for box in (Letterbox(), Letterbox((640, 640), auto=True), Letterbox((480, 480), pad_position="top_left")):
            ours, g = resize_opencv(bgr, box)
            theirs, pad = yolo_letterbox(bgr, box.size, auto=box.auto, center=box.pad_position == "center")
            assert np.array_equal(ours, theirs) and g.pad == pad and ours.shape[:2] == g.input


def test_yolos_minus_plus_tenth_rounding_is_the_floor_and_half_up_puts_the_odd_pixel_first():
    for total in range(0, 301):
        yolo = letterbox_geometry(100, 100 + total, Letterbox((100 + total, 100 + total), scaleup=False)).pad
        half_up = letterbox_geometry(100, 100 + total, Letterbox((100 + total, 100 + total), scaleup=False,
                                                                 pad_rounding="half_up")).pad
        assert yolo[:2] == (total // 2, total - total // 2)  # top gets the smaller half
        assert half_up[:2] == (total - total // 2, total // 2)
        assert (yolo == half_up) == (total % 2 == 0)


def test_points_map_back_to_the_source_pixels(sample):
    """A photo's corner pixels, letterboxed, sit where ``to_input`` says, and ``to_original``
    brings them back; a point in the padding maps outside the photo."""
    bgr = cv2.imread(str(sample / CLEAN_PHOTOS[0]))
    h, w = bgr.shape[:2]
    for box in (Letterbox((640, 640)), Letterbox((640, 640), pad_position="top_left"), LimitSide(480, "max")):
        out, g = resize_opencv(bgr, box)
        corners = np.array([[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]])
        mapped = g.to_input(corners)
        top, _, left, _ = g.pad
        assert np.allclose(mapped, [[left, top], [left + g.resized[1], top], [left + g.resized[1], top + g.resized[0]],
                                    [left, top + g.resized[0]]])
        assert np.allclose(g.to_original(mapped), corners)
        if top:  # the padding row above the photo is grey and maps above it
            assert (out[:top] == 114).all() and g.to_original(np.array([0.0, top / 2]))[1] < 0
    assert Geometry.from_dict(g.to_dict()) == g


@pytest.mark.parametrize("make, message", [
    (lambda: LimitSide(736, "mean"), "limit_type"),
    (lambda: Letterbox((640,)), "height, width"),
    (lambda: Letterbox(pad_position="bottom"), "pad_position"),
    (lambda: Letterbox(pad_rounding="ceil"), "pad_rounding"),
    (lambda: Letterbox(pad_value=300), "pad_value"),
    (lambda: limit_side_geometry(0, 10, LimitSide()), "empty"),
    (lambda: limit_side_geometry(2, 3000, LimitSide(480, "max")), "too thin"),
])
def test_bad_parameters_are_one_clear_error(make, message):
    with pytest.raises(GeometryError, match=message):
        make()
