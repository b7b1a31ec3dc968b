"""check's report points at `harness layers` when the classifier alone diverges, and only then."""

from harness.results.hints import LAYERS_HINT, explain
from harness.stage import Stage
from harness.verdict import Verdict


def test_isolated_output_divergence_points_at_harness_layers():
    why = explain(Stage.OUTPUT, Verdict.DIVERGED, Verdict.DIVERGED)
    assert why.endswith(LAYERS_HINT) and "harness layers IMAGES --executions onnx,onnx-fp16" in why


def test_inherited_or_preprocessing_divergence_does_not():
    assert LAYERS_HINT not in explain(Stage.OUTPUT, Verdict.DIVERGED, Verdict.CLOSE)
    assert LAYERS_HINT not in explain(Stage.RESIZE, Verdict.DIVERGED, Verdict.DIVERGED)
    assert explain(Stage.OUTPUT, Verdict.CLOSE, Verdict.DIVERGED) is None


def test_an_input_whose_normalization_alone_agrees_points_at_the_resize_and_the_letterbox():
    """issue 34: a letterbox placed elsewhere shows first at ``input`` where the deployment's own
    step answers the model input; the hint names the resize and the padding, not only the
    normalization, when the normalization alone agrees or cannot run alone."""
    from harness.results.hints import explain
    from harness.stage import Stage
    from harness.verdict import Verdict

    inherited = explain(Stage.INPUT, Verdict.DIVERGED, Verdict.CLOSE)
    assert "resize.pad_position" in inherited and "normalize.pixel_range" not in inherited
    unknown = explain(Stage.INPUT, Verdict.DIVERGED, None)
    assert "normalize.pixel_range" in unknown and "resize.pad_position" in unknown
    own = explain(Stage.INPUT, Verdict.DIVERGED, Verdict.DIVERGED)
    assert "normalize.pixel_range" in own and "pad_position" not in own
