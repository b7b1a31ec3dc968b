"""The segmenter's resize (a stretch to 320x320, ``resize.resampling = "pil"``) replayed by the
DALI graph on DALI's CPU kernels, on hymenoptera photos, in Pillow 13's pass order.

Pillow 13 resizes vertically first where the height shrinks by more than twice as many pixels as
the width (a portrait photo stretched to a square), horizontally first otherwise; its 8-bit
intermediate clips a Lanczos overshoot, so the order moves pixels. No server: the graph's resize
step alone (``CpuStageRunner``, what the served models run)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.paths import PROJECT_ROOT
from harness.preprocessing import opencv
from harness.preprocessing.dali_graph import CpuStageRunner
from harness.preprocessing.dali_pil import vertical_first
from harness.reference.recipes import TorchvisionRecipe
from harness.spec import Preprocess, ResizeSpec, load_spec
from harness.stage import Stage

HYMENOPTERA = PROJECT_ROOT.parent / "shared" / "datasets" / "hymenoptera" / "val"
PHOTOS = ("ants/161076144_124db762d6.jpg", "ants/181942028_961261ef48.jpg")
"""Two ants: 333 wide and 500 high (to 320x320: vertically first), 500 wide and 375 high (horizontally).
fn.resize's own edges moved their frames by 16 and 18 levels."""
PIL_FILTERS = {"linear": Image.BILINEAR, "cubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
FRAME = 2


@pytest.fixture(scope="module")
def images():
    assert HYMENOPTERA.is_dir(), f"the shared hymenoptera set is missing: {HYMENOPTERA}"
    return [np.asarray(Image.open(HYMENOPTERA / name).convert("RGB")) for name in PHOTOS]


def dali_and_pil(image: np.ndarray, resize: ResizeSpec) -> tuple[np.ndarray, np.ndarray]:
    ours = CpuStageRunner(Preprocess(resize=resize)).run(Stage.RESIZE, image).astype(np.int32)
    height, width = resize.output_size(*image.shape[:2])
    pil = np.asarray(Image.fromarray(image).resize((width, height), PIL_FILTERS[resize.interpolation]), np.int32)
    return ours, pil


def pil(interpolation: str, size=(320, 320)) -> ResizeSpec:
    return ResizeSpec(mode="stretch", size=size, interpolation=interpolation, antialias=True, resampling="pil")


@pytest.mark.parametrize("interpolation", list(PIL_FILTERS))
def test_the_segmenters_stretch_replays_pil_within_two_levels_in_either_order(images, interpolation):
    assert [vertical_first(*image.shape[:2], 320, 320) for image in images] == [True, False]
    for image in images:
        ours, theirs = dali_and_pil(image, pil(interpolation))
        assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 2, np.abs(ours - theirs).max()


def test_the_order_is_pillows_where_an_overshoot_is_clipped(images):
    """Lanczos on the ant, both ways round: each shrink within 2 levels of Pillow, the order of one
    applied to the other far from it (the intermediate's clipping moved), an enlargement too."""
    ant = images[0]
    for size in [(100, 300), (300, 100), (600, 420)]:  # vertically first, horizontally first, enlarged
        ours, theirs = dali_and_pil(ant, pil("lanczos", size))
        assert np.abs(ours - theirs).max() <= 2, (size, np.abs(ours - theirs).max())
    assert vertical_first(500, 333, 100, 300) and not vertical_first(500, 333, 300, 100)
    assert not vertical_first(500, 500, 100, 100)  # an even shrink: Pillow's long-standing horizontal first


def test_fn_resize_differs_in_the_frame_where_pil_renormalizes(images):
    """The mechanism of the segmenter's old 16-22 levels: DALI's own edges (the edge pixel repeated)
    differ from PIL's in the 2-pixel frame only; inside it, within a level (bilinear: no overshoot)."""
    own = ResizeSpec(mode="stretch", size=(320, 320), interpolation="linear", antialias=True)
    ours, theirs = dali_and_pil(images[0], own)
    diff = np.abs(ours - theirs)
    assert diff[FRAME:-FRAME, FRAME:-FRAME].max() <= 1 < diff.max()


def test_the_segmenters_spec_asks_for_pils_resampling_and_its_libraries_honour_it():
    spec = load_spec(PROJECT_ROOT / "model_repository" / "segmentation.toml")
    assert spec.preprocess.resize.resampling == spec.reference.preprocess.resize.resampling == "pil"
    opencv.check_supported(spec.preprocess)  # the OpenCV model's lanczos is PIL's own
    TorchvisionRecipe(spec.reference.preprocess)
