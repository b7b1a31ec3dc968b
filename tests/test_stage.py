"""harness/stage.py: one enum names every stage."""

import json

from harness.stage import ISOLATED_INPUT, STAGES, Stage


def test_stage_names_are_one_enum():
    assert [s.value for s in STAGES] == ["decode", "resize", "crop", "input", "output", "topk"]
    assert Stage("crop") is Stage.CROP and Stage.CROP == "crop" and f"{Stage.CROP}" == "crop"
    assert json.dumps({Stage.INPUT: Stage.OUTPUT}) == '{"input": "output"}'
    assert Stage.RESIZE.is_image and not Stage.INPUT.is_image
    assert all(ISOLATED_INPUT[s] is s.previous for s in ISOLATED_INPUT) and Stage.DECODE.previous is None
    assert {"crop": 1}[Stage.CROP] == 1

