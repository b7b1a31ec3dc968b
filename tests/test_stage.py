"""harness/stage.py: one enum names every stage."""

import json

from harness.stage import ISOLATED_INPUT, STAGES, Stage


def test_stage_names_are_one_enum():
    # postprocess: the task's result (issue 26); topk: classification's, under the name its reports keep.
    assert [s.value for s in STAGES] == ["decode", "resize", "crop", "input", "output", "postprocess", "topk"]
    assert Stage("crop") is Stage.CROP and Stage.CROP == "crop" and f"{Stage.CROP}" == "crop"
    assert json.dumps({Stage.INPUT: Stage.OUTPUT}) == '{"input": "output"}'
    assert Stage.RESIZE.is_image and not Stage.INPUT.is_image
    assert all(ISOLATED_INPUT[s] is s.previous for s in ISOLATED_INPUT) and Stage.DECODE.previous is None
    assert {"crop": 1}[Stage.CROP] == 1



def test_every_library_has_one_step_per_stage_and_one_registry_names_them(spec):
    """The tables the generic runner walks: a stage missing from one fails here, not mid-run."""
    from harness.preprocessing import PREPROCESS_STAGES, opencv
    from harness.preprocessing.dali_graph import steps
    from harness.reference import BUILT_IN, OpenCVRecipe, TorchvisionRecipe
    from harness.spec import RECIPES
    from harness.training.preprocess import CHOICES

    assert list(opencv.STEPS) == list(steps("cpu")) == list(PREPROCESS_STAGES)
    for recipe in (OpenCVRecipe(spec.reference.preprocess), TorchvisionRecipe(spec.reference.preprocess)):
        assert list(recipe.steps()) == list(PREPROCESS_STAGES)
    assert sorted(BUILT_IN) == sorted(RECIPES)
    assert CHOICES == ("deployed", "opencv", "torchvision")  # deployed, then the registry's recipes that train
