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
