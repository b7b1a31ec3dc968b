"""The tie rule as a pure function of two logit vectors (harness.compare.ties)."""

import numpy as np

from harness.compare.ties import default_tie_margin, flip_verdict, reference_margin
from harness.compare.tolerance import tolerances_for
from harness.tolerance import Tolerance
from harness.verdict import Verdict


def test_same_top1_is_no_flip():
    ref = np.array([3.0, 2.9, 0.0])
    assert flip_verdict(ref, 0, 0.5) is None


def test_a_flip_within_the_margin_is_a_tie_and_beyond_it_a_divergence():
    ref = np.array([3.0, 2.8, 0.0, -1.0])
    near = np.array([2.9, 2.95, 0.0, -1.0])  # the two best swap: the reference had them 0.2 apart
    assert reference_margin(ref, 1) == np.float64(3.0) - 2.8
    assert flip_verdict(ref, int(np.argmax(near)), 0.5) is Verdict.TIE
    assert flip_verdict(ref, 1, 0.1) is Verdict.DIVERGED  # a tighter margin, set by the option
    assert reference_margin(ref, 3) == 4.0 and flip_verdict(ref, 3, 0.5) is Verdict.DIVERGED


def test_the_default_margin_is_the_output_tolerance(spec):
    assert default_tie_margin(tolerances_for(spec.preprocess)) == 0.5
    assert default_tie_margin({"output": Tolerance(atol=0.2)}) == 0.2


def test_a_tie_ranks_between_close_and_diverged():
    assert Verdict.CLOSE.rank < Verdict.TIE.rank < Verdict.DIVERGED.rank
    assert Verdict.worst([Verdict.CLOSE, Verdict.TIE]) is Verdict.TIE


def test_a_tie_stands_only_where_what_came_before_explains_it():
    """issue 34: a near-threshold change is a tie when the outputs differ and the result step run
    alone on the reference's output agrees; a result step that diverges alone, or a tie on
    identical outputs, is the result step's own doing: diverged, and the metrics say why."""
    from harness.compare.ties import explained_by_upstream
    from harness.result import StageResult
    from harness.stage import Stage

    tie = StageResult(Stage.POSTPROCESS, Verdict.TIE, {"missed": 1}, Verdict.CLOSE, {})
    noisy, identical = (StageResult(Stage.OUTPUT, v, {}) for v in (Verdict.CLOSE, Verdict.EQUAL))
    assert explained_by_upstream(tie, noisy) is tie
    alone_diverged = StageResult(Stage.POSTPROCESS, Verdict.TIE, {"missed": 1}, Verdict.DIVERGED, {})
    judged = explained_by_upstream(alone_diverged, noisy)
    assert judged.verdict is Verdict.DIVERGED and "run alone" in judged.metrics["unexplained"]
    judged = explained_by_upstream(tie, identical)
    assert judged.verdict is Verdict.DIVERGED and "identical" in judged.metrics["unexplained"]
    # a close result whose step alone diverges (errors that cancel) is the step's divergence too
    close = StageResult(Stage.POSTPROCESS, Verdict.CLOSE, {}, Verdict.DIVERGED, {})
    assert explained_by_upstream(close, noisy).verdict is Verdict.DIVERGED
    # no isolated run, outputs that differ: the margin's word stands
    assert explained_by_upstream(StageResult(Stage.TOPK, Verdict.TIE, {}), noisy).verdict is Verdict.TIE


def test_a_changed_result_names_the_stage_that_made_it():
    """The first stage adding an error of its own (its isolated run, else its verdict), with its
    largest error; the result step itself where nothing before it differs."""
    from harness.compare.ties import made_by
    from harness.result import ImageResult, StageResult
    from harness.stage import Stage

    def stage(name, verdict, isolated=None, worst=0.0):
        return StageResult(name, verdict, {"max_abs": worst}, isolated, {"max_abs": worst} if isolated else None)

    decoded = stage(Stage.DECODE, Verdict.EQUAL)
    resized = stage(Stage.RESIZE, Verdict.CLOSE, Verdict.CLOSE, 2.0)
    cropped = stage(Stage.CROP, Verdict.CLOSE, Verdict.EQUAL, 0.0)  # inherits the resize's error
    post = stage(Stage.POSTPROCESS, Verdict.DIVERGED)
    assert made_by(ImageResult("a.jpg", (decoded, cropped, resized, post))) == "resize (close: max 2)"
    assert made_by(ImageResult("b.jpg", (decoded, cropped, post))) == "postprocess"
    output = stage(Stage.OUTPUT, Verdict.DIVERGED, None, 0.4)  # no isolated run: its own verdict
    assert made_by(ImageResult("c.jpg", (decoded, output, post))) == "output (diverged: max 0.4)"
