"""Segmentation's corner cases without a server: nothing salient (two empty masks agree), a
1x1 source, a strip, and a deployment answering NaN or a mask of the wrong size (a clear
divergence naming it, never a crash)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.segmentation.compare import boundary_f, compare_masks
from harness.segmentation.postprocess import SegmentationPostprocess
from harness.stage import Stage
from harness.task import TASKS
from harness.task.segmentation import ResultOutputs
from harness.verdict import Verdict

SALIENCY = {"name": "saliency"}


def test_a_flat_map_has_an_empty_mask_and_two_empty_masks_agree():
    post = SegmentationPostprocess(SALIENCY)
    result = post({"o": np.full((1, 320, 320), 0.02, np.float32)}, (240, 320))
    assert result.shape == (2, 240, 320) and not result[1].any() and not result[0].any()
    verdict, metrics = compare_masks(result, result.copy(), 0.1)
    assert verdict is Verdict.EQUAL and metrics["iou"] == metrics["dice"] == metrics["boundary_f"] == 1.0


@pytest.mark.parametrize("size", [(1, 1), (3, 900), (900, 2)])
def test_a_tiny_or_strip_source_gets_a_matte_of_its_own_size(size):
    rng = np.random.default_rng(1)
    result = SegmentationPostprocess(SALIENCY)({"o": rng.random((1, 320, 320), np.float32)}, size)
    assert result.shape == (2, *size) and np.isfinite(result).all()
    assert compare_masks(result, result.copy(), 0.1)[0] is Verdict.EQUAL


def test_a_nan_map_is_refused_by_name():
    bad = np.zeros((1, 320, 320), np.float32)
    bad[0, 5, 5] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        SegmentationPostprocess(SALIENCY)({"o": bad}, (10, 10))


def test_a_deployment_answering_nan_or_the_wrong_size_diverges_with_a_reason():
    reference = SegmentationPostprocess(SALIENCY)({"o": np.linspace(0, 1, 320 * 320, dtype=np.float32).reshape(1, 320, 320)},
                                                  (60, 80))
    task = TASKS["segmentation"]
    answer = {"MATTE": np.full((60, 80), np.nan, np.float32), "MASK": np.zeros((60, 80), np.uint8)}
    deployed = task.read_answer(answer, ResultOutputs())[Stage.POSTPROCESS]
    verdict, metrics = compare_masks(reference, deployed, 0.1)
    assert verdict is Verdict.DIVERGED and "NaN" in metrics["problem"]
    answer = {"MATTE": np.zeros((320, 320), np.float32), "MASK": np.zeros((320, 320), np.uint8)}
    verdict, metrics = compare_masks(reference, task.read_answer(answer, ResultOutputs())[Stage.POSTPROCESS], 0.1)
    assert verdict is Verdict.DIVERGED and "wrong size" in metrics["problem"] and "80x60" in metrics["problem"]


def test_flips_near_the_threshold_are_a_tie_and_far_ones_diverge():
    matte = np.tile(np.linspace(0, 1, 200, dtype=np.float32), (100, 1))
    reference = np.stack([matte, (matte > 0.5).astype(np.float32)])
    near = reference.copy()
    near[0] = np.clip(matte + 0.008, 0, 1)  # every pixel from 0.492 to 0.5 crosses the threshold
    near[1] = (near[0] > 0.5).astype(np.float32)
    verdict, metrics = compare_masks(reference, near, 0.1)
    assert verdict is Verdict.TIE and metrics["far_flipped"] == 0 and metrics["flipped"] > 0.005 * matte.size
    far = reference.copy()
    far[1, :, :40] = 1  # pixels at 0 to 0.2 in the mask: far from the threshold
    assert compare_masks(reference, far, 0.1)[0] is Verdict.DIVERGED


def test_the_boundary_f_score_allows_two_pixels():
    a = np.zeros((50, 50), bool)
    a[10:40, 10:40] = True
    assert boundary_f(a, np.roll(a, 2, axis=1)) == 1.0
    assert boundary_f(a, np.roll(a, 6, axis=1)) < 0.7


def test_two_class_logits_argmax_after_or_before_upsampling():
    """An argmax head made from a real-looking map: logits [2, H, W] = (0, logit(p)). After
    upsampling it is the saliency's mask at 0.5 (bilinear on the logits); before, the class
    mask upsampled by nearest."""
    rng = np.random.default_rng(5)
    p = np.clip(rng.random((32, 32)).astype(np.float32), 0.01, 0.99)
    logits = np.stack([np.zeros_like(p), np.log(p / (1 - p))])
    after = SegmentationPostprocess({"name": "argmax"})({"o": logits}, (64, 64))
    before = SegmentationPostprocess({"name": "argmax", "threshold_after_upsampling": False})({"o": logits}, (64, 64))
    assert after.shape == before.shape == (2, 64, 64)
    assert set(np.unique(after[1])) <= {0.0, 1.0} and after[0].min() >= 0.5  # the winner's probability
    np.testing.assert_array_equal(before[1][::2, ::2], (p > 0.5).astype(np.float32))
    assert compare_masks(after, before, 0.1)[1]["flipped"] > 0  # where they part: the planted culprit's effect


def test_a_users_postprocessing_answering_the_wrong_size_or_raising_is_named():
    """--postprocess FILE.py:NAME: its matte and mask must be at the source size; what it raises names it."""
    from harness.task.segmentation import UserSegmentationPostprocess
    from harness.task_api import PostprocessError

    logits = {"o": np.zeros((2, 32, 32), np.float32)}
    small = UserSegmentationPostprocess(lambda output, size: (output[1], output[1] > 0), "mine.py:small")
    with pytest.raises(PostprocessError, match=r"mine.py:small: its matte is \[32, 32\], not the source size 80x60"):
        small(logits, (60, 80))

    def broken(output, size):
        raise KeyError("class 7")

    with pytest.raises(PostprocessError, match="mine.py:broken failed: KeyError"):
        UserSegmentationPostprocess(broken, "mine.py:broken")(logits, (60, 80))
    good = UserSegmentationPostprocess(lambda output, size: (np.full(size, 200, np.uint8), np.ones(size)), "mine.py:ok")
    result = good(logits, (60, 80))
    assert result.shape == (2, 60, 80) and np.allclose(result[0], 200 / 255) and good.threshold == 0.5
    from harness.errors import UsageError

    with pytest.raises(UsageError, match="mine.py:table: dict is not callable"):
        UserSegmentationPostprocess({}, "mine.py:table")


def test_discovery_tells_class_logits_from_a_map_and_reads_a_result_by_name():
    """A [C, H, W] output with C > 1 named as logits is the segmentation task's, read as ``logits``;
    a [1, H, W] map as ``map``; an alpha and a mask are the result, by name; a classifier's [1000]
    logits stay the default task's."""
    from harness.deployment.discovery import ModelInfo, TensorInfo
    from harness.task_api import claim

    def model(*outputs):
        return ModelInfo("m", "python", 0, (TensorInfo("photo", "TYPE_UINT8", (-1,)),),
                         tuple(TensorInfo(n, t, d) for n, t, d in outputs))

    tasks, task = list(TASKS.values()), TASKS["segmentation"]
    logits = model(("class_logits", "TYPE_FP32", (2, -1, -1)))
    assert claim(logits, tasks)[0].name == "segmentation"
    assert task.choose_output(logits, None).kind == "logits"
    assert task.choose_output(model(("out", "TYPE_FP32", (1, 320, 320))), None).kind == "map"
    assert claim(model(("class_logits", "TYPE_FP32", (1000,))), tasks)[0].name != "segmentation"
    result = model(("alpha", "TYPE_FP32", (-1, -1)), ("mask", "TYPE_UINT8", (-1, -1)))
    assert task.result_outputs(result).names == ("alpha", "mask") and claim(result, tasks)[0].name == "segmentation"


def test_a_mask_beyond_the_specs_max_output_pixels_is_refused_by_name():
    """Issue 45: a 13376 x 13376 photo's matte and mask were 895 MB; the spec's ceiling (default
    33.5 megapixels) refuses it before any plane is made, in the server and in the reference alike."""
    from harness.postprocessing import MAX_OUTPUT_PIXELS

    saliency = {"o": np.full((1, 320, 320), 0.5, np.float32)}
    assert MAX_OUTPUT_PIXELS == 2 ** 25
    with pytest.raises(ValueError, match="13376x13376 photo .* exceed the 33.6 megapixels .*max_output_pixels"):
        SegmentationPostprocess(SALIENCY)(saliency, (13376, 13376))
    assert SegmentationPostprocess(SALIENCY)(saliency, (4000, 6000)).shape == (2, 4000, 6000)  # a 24 MP camera photo
    small = SegmentationPostprocess({**SALIENCY, "max_output_pixels": 100})
    with pytest.raises(ValueError, match="max_output_pixels"):
        small(saliency, (11, 10))
    assert SegmentationPostprocess({"name": "argmax", "max_output_pixels": 100})(
        {"o": np.zeros((2, 8, 8), np.float32)}, (10, 10)).shape == (2, 10, 10)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="max_output_pixels is a whole number"):
            SegmentationPostprocess({**SALIENCY, "max_output_pixels": bad})


def test_a_matte_alone_is_the_result_its_mask_the_specs_threshold_at_the_source_size():
    """rembg's answer (uint8 at the photo's size, any name), or a float matte named so: read as the
    matte. At the model's size it is brought to the source size as the spec's saliency brings its
    own, so the saliency's uint8 matte answered at 320x320 makes the reference's result exactly; at
    another size it is left there (the comparison names the wrong size). A uint8 matte is 0 to 255
    by its type, whatever its values."""
    from harness.deployment.discovery import ModelInfo, TensorInfo
    from harness.postprocessing import SaliencyParams
    from harness.segmentation.postprocess import from_matte

    def model(*outputs):
        return ModelInfo("m", "python", 0, (TensorInfo("photo", "TYPE_STRING", (1,)),),
                         tuple(TensorInfo(n, t, d) for n, t, d in outputs))

    task = TASKS["segmentation"]
    assert task.result_outputs(model(("alpha", "TYPE_UINT8", (-1, -1)))) == ResultOutputs("alpha", None)
    assert task.result_outputs(model(("out", "TYPE_UINT8", (1, -1, -1)))) == ResultOutputs("out", None)
    assert task.result_outputs(model(("matte", "TYPE_FP32", (320, 320)))) == ResultOutputs("matte", None)
    assert task.result_outputs(model(("out", "TYPE_FP32", (320, 320)))) is None  # a float plane unnamed: the raw map
    assert task.result_outputs(model(("mask", "TYPE_UINT8", (-1, -1)))) is None  # a mask alone: not a matte
    # Issue 59: a step without batching keeping the map's NCHW layout answers [1, 1, H, W]: a plane all the same
    assert task.result_outputs(model(("alpha", "TYPE_FP32", (1, 1, -1, -1)))) == ResultOutputs("alpha", None)
    assert task.result_outputs(model(("out", "TYPE_UINT8", (1, 1, -1, -1)))) == ResultOutputs("out", None)
    assert task.result_outputs(model(("alpha", "TYPE_FP32", (1, 2, -1, -1)))) is None  # two planes: not one matte
    p = SaliencyParams()
    rng = np.random.default_rng(0)
    raw = np.clip(np.cumsum(rng.normal(size=(1, 320, 320)), axis=2) / 40 + 0.5, 0, 1).astype(np.float32)
    reference = SegmentationPostprocess(SALIENCY)({"o": raw}, (200, 300))
    small = ((raw[0] - raw.min()) / (raw.max() - raw.min()) * 255).astype(np.uint8)  # rembg's matte, not upsampled
    np.testing.assert_array_equal(from_matte(small / 255.0, (200, 300), (320, 320), p), reference)
    at_source = from_matte(reference[0], (200, 300), (320, 320), p)
    np.testing.assert_array_equal(at_source, reference)
    assert from_matte(np.zeros((50, 50)), (200, 300), (320, 320), p).shape == (2, 50, 50)
    levels = task.read_answer({"alpha": np.ones((4, 4), np.uint8)}, ResultOutputs("alpha", None))[Stage.POSTPROCESS]
    assert levels.shape == (1, 4, 4) and levels.max() == pytest.approx(1 / 255)
    nchw = task.read_answer({"alpha": np.full((1, 1, 4, 4), 0.25, np.float32)}, ResultOutputs("alpha", None))
    assert nchw[Stage.POSTPROCESS].shape == (1, 4, 4) and nchw[Stage.POSTPROCESS].max() == 0.25


def test_the_output_ceiling_a_pipelines_first_step_checks_is_the_postprocessings_own():
    # Issue 58: the served pipelines refuse a source over max_output_pixels from its header, before
    # any work (harness.serving.preprocess.check_output_ceiling); the ceiling they read is this one.
    from harness.postprocessing import MAX_OUTPUT_PIXELS, output_ceiling
    from harness.spec import load_spec

    assert output_ceiling(load_spec("model_repository/segmentation.toml").postprocess) == MAX_OUTPUT_PIXELS
    assert output_ceiling({**SALIENCY, "max_output_pixels": 100}) == 100
    assert output_ceiling(load_spec("model_repository/detection.toml").postprocess) is None  # a detector's: none
    assert output_ceiling(None) is None and output_ceiling({"name": "mine.py:post"}) is None
