"""harness/compare/aggregate.py: folding real image results (from small arrays) into a summary."""

import numpy as np
import pytest

from harness.compare.aggregate import WORST_KEPT, MetricStats, RunSummary
from harness.result import ImageResult
from harness.results import ImageIssue
from harness.stage import STAGES, Stage
from harness.verdict import Verdict
from tests.runs import deployed_like, result, stages, summary


def test_equal_images_are_equal_at_every_stage():
    s = summary(result("a.jpg"), result("b.jpg", seed=1))
    assert s.compared == s.images == 2 and s.failed == () and s.flips == ()
    # Every stage of classification: its result stage is topk (postprocess is another task's).
    assert [st.stage for st in s.stages] == [st for st in STAGES if st is not Stage.POSTPROCESS]
    assert all(st.verdict is Verdict.EQUAL and st.images == {"equal": 2} for st in s.stages)
    assert s.first_divergent_stage is None and s.first_divergent_per_image == {"none": 2}
    assert s.verdict is Verdict.EQUAL


def test_a_divergence_is_located_counted_and_its_image_ranked_worst():
    s = summary(result("a.jpg"), result("bad.jpg", resize_error=40), result("c.jpg", seed=2))
    resize = s.stage(Stage.RESIZE)
    assert resize.verdict is Verdict.DIVERGED and resize.images == {"equal": 2, "diverged": 1}
    assert resize.count(Verdict.DIVERGED) == 1 and resize.count(Verdict.CLOSE) == 0
    assert s.first_divergent_stage is Stage.RESIZE and s.first_divergent_per_image == {"none": 2, "resize": 1}
    assert resize.worst_images[0] == "bad.jpg"
    error = np.abs(deployed_like(stages(0), resize_error=40)[Stage.RESIZE].astype(int) - stages(0)[Stage.RESIZE])
    assert resize.metric("max_abs") == error.max() == 40 and resize.metric("mean_abs", "mean") == pytest.approx(error.mean() / 3)
    assert resize.metrics["max_abs"].images == 3
    # Isolation: resize adds the error itself; crop and input only inherit it.
    assert resize.isolated_verdict is Verdict.DIVERGED
    assert s.stage(Stage.CROP).verdict is Verdict.DIVERGED and s.stage(Stage.CROP).isolated_verdict is Verdict.EQUAL
    assert "adds the error by itself" in resize.why and "inherits the error" in s.stage(Stage.CROP).why
    assert s.stage(Stage.DECODE).why is None


def test_histograms_count_every_element_of_every_image():
    s = summary(result("a.jpg"), result("b.jpg", resize_error=3))
    for stage in (Stage.DECODE, Stage.RESIZE, Stage.CROP, Stage.INPUT, Stage.OUTPUT):
        assert sum(s.stage(stage).histogram) == 2 * stages(0)[stage].size, stage
    assert s.stage(Stage.TOPK).histogram == ()


def test_failed_and_rejected_images_are_listed_by_name_and_counted_in():
    s = summary(ImageResult("z.jpg", error="unreadable: gone"), result("a.jpg"),
                ImageResult("m.png", error="deployed: truncated PNG", rejected_by="deployment"),
                ImageResult("b.jpg", error="reference: cv2.error", rejected_by="training"),
                ImageResult("c.jpg", error="comparison failed: MemoryError"))
    assert s.images == 5 and s.compared == 1
    assert s.failed == (ImageIssue("c.jpg", "comparison failed: MemoryError"), ImageIssue("z.jpg", "unreadable: gone"))
    assert s.rejected_by("deployment") == (ImageIssue("m.png", "deployed: truncated PNG"),)
    assert [r.image for r in s.rejected_by("training")] == ["b.jpg"]


def test_top1_changes_are_ties_or_divergences_by_the_reference_margin():
    s = summary(result("tie.jpg", logit_swap=0.05), result("flip.jpg", margin=2.0, logit_swap=0.05), result("a.jpg"))
    assert [(f.image, f.verdict) for f in s.flips] == [("flip.jpg", Verdict.DIVERGED), ("tie.jpg", Verdict.TIE)]
    assert s.ties == 1 and s.flips[0].margin == pytest.approx(2.0) and s.flips[0].reference_top1 == 0
    assert s.stage(Stage.TOPK).verdict is Verdict.DIVERGED and s.stage(Stage.TOPK).images["tie"] == 1
    assert s.stage(Stage.TOPK).metric("top1_agree", "mean") == pytest.approx(1 / 3)


def test_a_shape_mismatch_is_diverged_and_worst():
    s = summary(result("a.jpg", resize_error=40), result("short.jpg", other_shape=True))
    resize = s.stage(Stage.RESIZE)
    assert resize.images == {"diverged": 2} and resize.worst_images[0] == "short.jpg"
    assert resize.metrics["shape_mismatch"].images == 1


def test_worst_images_are_bounded():
    s = summary(*(result(f"img{i}.jpg", resize_error=i + 1) for i in range(WORST_KEPT + 3)))
    worst = s.stage(Stage.RESIZE).worst_images
    assert len(worst) == WORST_KEPT and worst[0] == f"img{WORST_KEPT + 2}.jpg"


def test_results_read_back_from_images_jsonl_summarise_alike():
    """--resume folds results read back from their dict form: the summary must not change."""
    results = [result("a.jpg"), result("b.jpg", resize_error=7), result("t.jpg", logit_swap=0.05),
               ImageResult("x.jpg", error="deployed: bad", rejected_by="deployment")]
    assert summary(*(ImageResult.from_dict(r.to_dict()) for r in results)) == summary(*results)


@pytest.mark.parametrize("key, values, worst", [("max_abs", [1.0, 3.0, 2.0], 3.0), ("psnr_db", [40.0, 30.0, 50.0], 30.0),
                                                ("top1_prob_change", [0.1, -0.3, 0.2], -0.3)])
def test_each_metric_keeps_its_worst_and_its_mean(key, values, worst):
    stats = MetricStats(worst=values[0])
    for v in values:
        stats.add(key, v)
    frozen = stats.freeze()
    assert frozen.worst == worst and frozen.mean == pytest.approx(np.mean(values)) and frozen.images == 3


def test_infinite_values_are_worst_but_not_averaged():
    stats = MetricStats(worst=1.0)
    for v in (1.0, float("inf"), 3.0):
        stats.add("max_abs", v)
    assert stats.freeze().worst == float("inf") and stats.freeze().mean == 2.0


def test_an_empty_run_has_no_stages_and_no_verdict():
    s = RunSummary().result()
    assert s.images == 0 and s.stages == () and s.verdict is None and s.first_divergent_stage is None
