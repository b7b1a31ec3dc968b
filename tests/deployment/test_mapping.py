"""Which stage a deployed tensor is: the rules on a real photo's stages in every layout a
deployment may give them (no server: the stages come from the reference recipe)."""

import numpy as np
import pytest

from harness.deployment.mapping import TensorMapping, map_tensor, overridden, parse_overrides
from harness.reference import OpenCVRecipe
from harness.spec import Preprocess
from harness.stage import Stage


@pytest.fixture(scope="module")
def stages(photo):
    return OpenCVRecipe(Preprocess())(photo("baboon.jpg"))  # 512x512 -> 256 -> crop 224


def stage_of(array, *, decoded=(512, 512), model_input=False, scores=False) -> TensorMapping:
    return map_tensor("step", "t", array, decoded_size=decoded, input_size=(224, 224), model_input=model_input,
                      scores=scores)


@pytest.mark.parametrize("name, stage", [("decode", Stage.DECODE), ("resize", Stage.RESIZE), ("crop", Stage.CROP)])
def test_images_by_their_size_in_either_layout_and_scale(stages, name, stage):
    hwc = stages[name]
    for array, layout in [(hwc, "HWC"), (np.transpose(hwc, (2, 0, 1)), "CHW"), (hwc.astype(np.float32), "HWC")]:
        mapping = stage_of(array)
        assert (mapping.stage, mapping.layout) == (stage, layout), mapping.why
        np.testing.assert_array_equal(mapping.to_stage(array), hwc)  # back to the harness's HWC


def test_the_classifiers_input_is_the_model_input_whatever_its_layout(stages):
    chw = stages[Stage.INPUT]
    nhwc = np.transpose(chw, (1, 2, 0))
    for array, layout in [(chw, "CHW"), (nhwc, "HWC")]:
        mapping = stage_of(array, model_input=True)
        assert (mapping.stage, mapping.layout) == (Stage.INPUT, layout)
        np.testing.assert_array_equal(mapping.to_stage(array), chw)
        np.testing.assert_array_equal(mapping.from_stage(chw, np.float32), array)  # what the step is fed


def test_what_maps_to_no_stage_says_why(stages):
    encoded = np.frombuffer(b"\xff\xd8" * 100, np.uint8)
    assert "not a 3-channel image" in stage_of(encoded).why and stage_of(encoded).stage is None
    earlier = stage_of(stages[Stage.INPUT])  # normalized, but not what the classifier is fed
    assert earlier.stage is None and "the classifier is fed a later one" in earlier.why
    assert stage_of(np.zeros(1000, np.float32), scores=True).stage is Stage.OUTPUT


def test_overrides_win_and_are_checked(stages):
    crop = stage_of(stages[Stage.CROP])
    assert overridden(crop, "resize", stages[Stage.CROP]).stage is Stage.RESIZE
    assert overridden(crop, "none", stages[Stage.CROP]).stage is None
    with pytest.raises(ValueError, match="not a 3-channel image"):
        overridden(stage_of(np.zeros(10, np.uint8)), "crop", np.zeros(10, np.uint8))
    assert parse_overrides(["prep=crop", "prep.out=none"]) == {"prep": "crop", "prep.out": "none"}
    for bad in (["prep"], ["prep=topk"], ["=crop"]):
        with pytest.raises(ValueError, match="STEP_MODEL=STAGE"):
            parse_overrides(bad)
