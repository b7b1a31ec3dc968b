"""Which stage a deployed tensor is: the rules on a real photo's stages in every layout and
scale a deployment may give them, read against the reference's own stages of the photo, on a
bright and a dark version of it alike (no server: the stages come from the reference recipe)."""

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from harness.deployment.mapping import TensorMapping, map_tensor, overridden, parse_overrides, read_scale
from harness.reference import OpenCVRecipe
from harness.spec import Preprocess
from harness.stage import Stage
from tests.conftest import encode

IMAGENET = Preprocess(normalize=Preprocess().normalize.__class__(1.0, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))


def variant(photo, factor: float) -> bytes:
    """The photo re-encoded with its brightness scaled by ``factor`` (0.25: dark, 1.6: bright)."""
    import io

    with Image.open(io.BytesIO(photo("baboon.jpg"))) as image:
        return encode(ImageEnhance.Brightness(image.convert("RGB")).enhance(factor), quality=95)


@pytest.fixture(scope="module", params=[1.0, 0.25, 1.6], ids=["as is", "dark", "bright"])
def stages(photo, request):
    return OpenCVRecipe(IMAGENET)(variant(photo, request.param))  # 512x512 -> 256 -> crop 224


def stage_of(array, stages, *, decoded=(512, 512), model_input=False, scores=False) -> TensorMapping:
    return map_tensor("step", "t", array, decoded_size=decoded, input_size=(224, 224), model_input=model_input,
                      scores=scores, reference=stages)


@pytest.mark.parametrize("name, stage", [("decode", Stage.DECODE), ("resize", Stage.RESIZE), ("crop", Stage.CROP)])
def test_images_by_their_size_in_either_layout_and_scale(stages, name, stage):
    hwc = stages[name]
    for array, layout in [(hwc, "HWC"), (np.transpose(hwc, (2, 0, 1)), "CHW"), (hwc.astype(np.float32), "HWC"),
                          (hwc.astype(np.float32) / 255, "HWC")]:
        mapping = stage_of(array, stages)
        assert (mapping.stage, mapping.layout) == (stage, layout), mapping.why
        np.testing.assert_allclose(mapping.to_stage(array), hwc, atol=1e-3)  # back to the harness's HWC on 0-255


def test_a_normalized_tensor_is_the_references_input_in_its_layout_whatever_the_brightness(stages):
    chw = stages[Stage.INPUT]
    nhwc = np.transpose(chw, (1, 2, 0))
    for array, layout in [(chw, "CHW"), (nhwc, "HWC")]:
        for fed in (True, False):  # the classifier's input, or a step before a layout step
            mapping = stage_of(array, stages, model_input=fed)
            assert (mapping.stage, mapping.layout) == (Stage.INPUT, layout), mapping.why
            assert "normalized" in mapping.why
            np.testing.assert_array_equal(mapping.to_stage(array), chw)
            np.testing.assert_array_equal(mapping.from_stage(chw, np.float32), array)  # what the step is fed


def test_the_classifiers_input_on_the_0_255_scale_is_an_image_not_the_model_input(stages):
    crop_chw = np.transpose(stages[Stage.CROP], (2, 0, 1)).astype(np.float32)
    mapping = stage_of(crop_chw, stages, model_input=True)  # a model that normalizes inside
    assert (mapping.stage, mapping.layout) == (Stage.CROP, "CHW"), mapping.why


@pytest.mark.parametrize("mean, std", [((127.5,) * 3, (127.5,) * 3), ((127.0,) * 3, (128.0,) * 3),
                                       ((0.5 * 255,) * 3, (255.0,) * 3), ((123.7, 116.3, 103.5), (1.0,) * 3)])
def test_other_normalizations_read_as_normalized(stages, mean, std):
    x = (stages[Stage.CROP].astype(np.float32) - np.float32(mean)) / np.float32(std)
    scale = read_scale(x, stages[Stage.CROP])
    assert scale.kind == "normalized", scale.why
    assert abs(scale.std - np.mean(std)) < 0.15 * np.mean(std)


def test_what_maps_to_no_stage_says_why_and_how_to_compare_it(stages):
    encoded = np.frombuffer(b"\xff\xd8" * 100, np.uint8)
    assert "not a 3-channel image" in stage_of(encoded, stages).why and stage_of(encoded, stages).stage is None
    flat = np.full((224, 224, 3), 0.5, np.float32)  # nothing to read a scale from
    unsure = stage_of(flat, stages)
    assert unsure.stage is None and unsure.suggestion == "--stage step.t=STAGE, STAGE crop (an image) or input (normalized)"
    assert "to compare it: --stage step.t=STAGE" in unsure.describe()
    small = stage_of(np.transpose(stages[Stage.INPUT], (1, 2, 0))[:100, :100], stages)  # normalized, not at the input size
    assert small.stage is None and "not the model input's size" in small.why
    assert stage_of(np.zeros(1000, np.float32), stages, scores=True).stage is Stage.OUTPUT


def test_without_reference_images_only_the_input_is_read(stages):
    only_input = {Stage.INPUT: stages[Stage.INPUT]}
    assert stage_of(stages[Stage.INPUT], only_input).stage is Stage.INPUT
    image = stage_of(stages[Stage.CROP].astype(np.float32), only_input)
    assert image.stage is None and image.suggestion


def test_overrides_win_take_the_scale_and_name_their_source(stages):
    crop = stage_of(stages[Stage.CROP], stages)
    assert overridden(crop, "resize", stages[Stage.CROP]).stage is Stage.RESIZE
    assert overridden(crop, "none", stages[Stage.CROP]).stage is None
    unit = stages[Stage.CROP].astype(np.float32) / 255
    forced = overridden(stage_of(unit, stages), "crop", unit, "[deployment.stages] of spec.toml", stages)
    assert forced.scale == 255 and forced.why == "set by [deployment.stages] of spec.toml, on the 0-1 scale"
    with pytest.raises(ValueError, match="not a 3-channel image"):
        overridden(stage_of(np.zeros(10, np.uint8), stages), "crop", np.zeros(10, np.uint8))
    assert parse_overrides(["prep=crop", "prep.out=none"]) == {"prep": "crop", "prep.out": "none"}
    for bad in (["prep"], ["prep=topk"], ["=crop"]):
        with pytest.raises(ValueError, match="STEP_MODEL=STAGE"):
            parse_overrides(bad)


def test_an_unbatched_steps_nchw_tensor_with_a_batch_of_one_is_mapped_as_a_batched_steps(stages):
    """``[1, 3, H, W]`` (an unbatched model's input, as ONNX files declare it): read without its batch
    axis, given back with it when the step runs alone."""
    from harness.deployment.stepwise import map_outputs

    chw = stages[Stage.INPUT]
    (mapping,) = map_outputs("m", [("prep", "tensor", "x", chw[None], True, False)], (512, 512), (224, 224), {},
                             stages, {})
    assert (mapping.stage, mapping.layout, mapping.batch_of_one) == (Stage.INPUT, "CHW", True), mapping.why
    assert "(a batch of one) -> input" in mapping.describe()
    np.testing.assert_array_equal(mapping.to_stage(chw[None]), chw)
    assert mapping.from_stage(chw, np.float32).shape == (1, 3, 224, 224)
    (scores,) = map_outputs("m", [("net", "map", "y", np.zeros((1, 1, 224, 224), np.float32), False, True)],
                            (512, 512), (224, 224), {}, stages, {})
    assert scores.stage is Stage.OUTPUT and scores.batch_of_one
