"""``resize.edges``: PIL's edge handling, replayed by the DALI graph (CPU kernels), on real photos.

PIL cuts its filter at the image's edge and renormalizes the weights left, and rounds to uint8
between its two passes (horizontal first, unless the height shrinks by more than twice what the
width does: Pillow 13); ``fn.resize`` repeats the edge pixel and keeps floats between passes.
No server: the graph's resize step alone (``CpuStageRunner``, what the served models run)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.paths import PROJECT_ROOT
from harness.preprocessing import opencv
from harness.preprocessing.dali_graph import CpuStageRunner
from harness.reference.recipes import TorchvisionRecipe
from harness.spec import Preprocess, ResizeSpec, SpecError, load_spec, parse_spec
from harness.stage import Stage

HYMENOPTERA = PROJECT_ROOT.parent / "shared" / "datasets" / "hymenoptera" / "val"
PHOTOS = ("ants/161076144_124db762d6.jpg", "bees/1032546534_06907fe3b3.jpg")
"""An ant (333 wide, 500 high: fn.resize is 16 levels off PIL at its edge) and a bee (500 x 366)."""
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


@pytest.mark.parametrize("interpolation", list(PIL_FILTERS))
@pytest.mark.parametrize("size", [(320, 320), (600, 420)], ids=["shrink", "enlarge"])
def test_renormalized_edges_replay_pil_within_two_levels(images, interpolation, size):
    for image in images:
        resize = ResizeSpec(mode="stretch", size=size, interpolation=interpolation, antialias=True, edges="renormalize")
        ours, pil = dali_and_pil(image, resize)
        assert ours.shape == pil.shape
        assert np.abs(ours - pil).max() <= 2 and np.abs(ours - pil).mean() < 0.1


def test_fn_resize_repeats_the_edge_pixel_where_pil_renormalizes(images):
    """The mechanism: DALI's own edges differ in the 2-pixel frame only (inside, within a level)."""
    image = images[0]
    ours, pil = dali_and_pil(image, ResizeSpec(mode="stretch", size=(320, 320), interpolation="linear",
                                               antialias=True, edges="replicate"))
    diff = np.abs(ours - pil)
    assert diff[FRAME:-FRAME, FRAME:-FRAME].max() <= 1 < diff.max()
    # renormalized: the same photo, the frame within a level too
    ours, pil = dali_and_pil(image, ResizeSpec(mode="stretch", size=(320, 320), interpolation="linear",
                                               antialias=True, edges="renormalize"))
    assert np.abs(ours - pil).max() <= 1


def test_the_pass_order_follows_pillow(images):
    """Pillow 13 runs the vertical pass first where the height shrinks by more than twice as many
    pixels as the width; a Lanczos overshoot clipped between the passes then differs by order. A
    shrink of each kind, the other order's result kept apart."""
    image = images[0]  # 500 x 333
    for size in [(100, 300), (300, 100)]:  # vertical first (400 > 2 x 33), horizontal first
        ours, pil = dali_and_pil(image, ResizeSpec(mode="stretch", size=size, interpolation="lanczos", antialias=True,
                                                   edges="renormalize"))
        assert np.abs(ours - pil).max() <= 2


def test_shorter_side_and_float_resizes_renormalize_too(images):
    image = images[1]
    resize = ResizeSpec(mode="shorter_side", size=(224,), interpolation="cubic", antialias=True, edges="renormalize")
    ours, pil = dali_and_pil(image, resize)
    assert ours.shape[:2] == resize.output_size(*image.shape[:2]) and np.abs(ours - pil).max() <= 2
    floats = CpuStageRunner(Preprocess(resize=ResizeSpec(mode="stretch", size=(320, 320), interpolation="linear",
                                                         antialias=True, edges="renormalize", dtype="float32")))
    out = floats.run(Stage.RESIZE, image)
    assert out.dtype == np.float32 and np.abs(out - pil_resize(image, (320, 320))).max() < 1.0


def pil_resize(image, size):
    return np.asarray(Image.fromarray(image).resize(size[::-1], Image.BILINEAR), np.float32)


def test_the_segmenters_spec_asks_for_pils_edges_and_every_library_honours_or_refuses():
    spec = load_spec(PROJECT_ROOT / "model_repository" / "segmentation.toml")
    assert spec.preprocess.resize.edges == "renormalize"
    opencv.check_supported(spec.preprocess)  # the OpenCV model's lanczos is PIL's: renormalized
    TorchvisionRecipe(spec.reference.preprocess)
    with pytest.raises(SpecError, match="cv2.resize repeats the edge pixel"):
        opencv.check_supported(parse_spec({"resize": {"edges": "renormalize"}}).preprocess)
    with pytest.raises(SpecError, match="PIL's resize"):
        TorchvisionRecipe(parse_spec({"resize": {"edges": "replicate", "antialias": True}}).preprocess)
    with pytest.raises(SpecError, match="resize.edges"):
        parse_spec({"resize": {"edges": "mirror"}})
