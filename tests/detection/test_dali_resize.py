"""harness/preprocessing/dali_resize.py in DALI's CPU pipeline (the production DALI, 2.1.1): the
sizes of harness.geometry, the pixels of its OpenCV resize within one level, the
padding where the spec puts it, and only arguments the production DALI has."""

from __future__ import annotations

import cv2
import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types
import pytest
from nvidia.dali import pipeline_def

from harness.geometry import Letterbox, LimitSide, geometry, resize_opencv
from harness.preprocessing import dali_resize
from harness.preprocessing.dali_graph import missing_arguments, pipeline_arguments
from tests.detection.conftest import CLEAN_PHOTOS

RESIZES = [LimitSide(736, "min"), LimitSide(480, "max"), LimitSide(736, "min", max_side_limit=800), Letterbox(),
           Letterbox((640, 640), auto=True), Letterbox((480, 640), pad_position="top_left"),
           Letterbox((320, 320), pad_rounding="half_up", scaleup=False)]


def run(images, p):
    @pipeline_def(batch_size=len(images), num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        x = fn.external_source(name="X", layout="HWC", dtype=types.UINT8, ndim=3)
        return dali_resize.limit_side(x, p) if isinstance(p, LimitSide) else dali_resize.letterbox(x, p)

    pipe = pipeline()
    pipe.build()
    pipe.feed_input("X", images)
    (out,) = pipe.run()
    return [np.array(out[i]) for i in range(len(images))], pipe


@pytest.mark.parametrize("p", RESIZES, ids=str)
def test_dali_resizes_like_opencv_on_real_photos_with_the_production_arguments(sample, p):
    images = [cv2.imread(str(sample / name)) for name in CLEAN_PHOTOS[:4]]
    outputs, pipe = run(images, p)
    for image, out in zip(images, outputs):
        expected, _ = resize_opencv(image, p)
        assert out.shape == expected.shape
        assert np.abs(out.astype(int) - expected).max() <= 1  # bilinear rounding; a misplaced pad would be ~100
    assert missing_arguments(pipeline_arguments(pipe)) == []


@pytest.mark.parametrize("p", RESIZES, ids=str)
def test_dali_sizes_are_the_geometrys_over_many_sizes(p):
    rng = np.random.default_rng(7)
    sizes = [(int(rng.integers(64, 900)), int(rng.integers(64, 900))) for _ in range(24)] + [(375, 500), (640, 640), (333, 500)]
    outputs, _ = run([np.zeros((h, w, 1), np.uint8) + 50 for h, w in sizes], p)
    for (h, w), out in zip(sizes, outputs):
        g = geometry(h, w, p)
        assert out.shape[:2] == g.input, (h, w)
        if any(g.pad):  # the padding lies where the geometry says, in the pad value
            top, bottom, left, right = g.pad
            assert (out[:top] == 114).all() and (out[out.shape[0] - bottom:] == 114).all()
            assert (out[:, :left] == 114).all() and (out[:, out.shape[1] - right:] == 114).all()
            assert (out[top:top + g.resized[0], left:left + g.resized[1]] == 50).all()
