"""harness/results/, the typed run model, built from real small arrays: no server."""

import json

import pytest

from harness.files import json_safe
from harness.result import ImageResult
from harness.results import RunComparison, SpecInfo
from harness.stage import STAGES, Stage
from harness.verdict import Verdict
from tests.runs import TOLERANCES, check_report, result, summary

CHECK_REPORT_KEYS = ["images", "compared", "failed", "rejected", "skipped", "ties", "flips", "first_divergent_stage",
                     "first_divergent_per_image", "stages", "verdict", "reference", "deployed", "spec", "versions", "run"]
"""report.json of `harness check`, as documented: its fields stay (new ones may be added)."""
STAGE_KEYS = ["name", "verdict", "images", "metrics", "isolated", "isolated_verdict", "isolated_images", "histogram",
              "worst_images", "why"]


def test_check_report_json_keeps_its_fields():
    report = check_report(result("a.jpg"), result("b.jpg", resize_error=40), result("t.jpg", logit_swap=0.05),
                          ImageResult("x.jpg", error="deployed: bad", rejected_by="deployment"))
    data = json.loads(json.dumps(json_safe(report.to_dict()), allow_nan=False))
    assert [k for k in data if k in CHECK_REPORT_KEYS] == CHECK_REPORT_KEYS
    # Issue 26: the task and its events (classification's are the flips, under both names for one release).
    assert data["task"] == "classification" and data["events"] == data["flips"]
    assert all(list(stage) == STAGE_KEYS for stage in data["stages"])
    assert [s["name"] for s in data["stages"]] == [s.value for s in STAGES if s is not Stage.POSTPROCESS]
    assert data["images"] == 4 and data["compared"] == 3 and data["ties"] == 1 and data["verdict"] == "diverged"
    assert data["first_divergent_stage"] == "resize" and data["first_divergent_per_image"]["resize"] == 1
    assert data["rejected"] == {"deployment": [{"image": "x.jpg", "reason": "deployed: bad"}], "training": []}
    assert data["flips"] == [{"image": "t.jpg", "verdict": "tie", "reference_top1": 0, "deployed_top1": 1,
                              "margin": pytest.approx(0.2)}]
    assert data["run"] == {"seconds": 1.5, "incomplete": False, "stopped_reason": None, "fail_on": "diverged",
                           "isolated": True, "tie_margin": 0.5, "scores_kind": "logits", "top_k": 3,
                           "allow_rejected": False, "reference_answers_alike": False}
    assert data["deployed"] == {"ensemble": "classify_dali", "taps_model": "preprocess_dali_taps", "pipeline": "dali",
                                "url": "127.0.0.1:8001", "protocol": "grpc"}
    assert data["spec"]["tolerances"]["resize"] == {"atol": 4.0, "rtol": 0.0, "max_fraction": 0.001, "mean_atol": 1.0,
                                                    "max_total_variation": None}
    resize = data["stages"][1]
    assert resize["images"] == {"equal": 2, "diverged": 1} and resize["why"].startswith("this stage adds the error")


@pytest.mark.parametrize("results, fail_on, allow_rejected, fails", [
    ((result("a.jpg"),), "diverged", False, False),
    ((result("a.jpg"),), "close", False, False),  # equal everywhere: nothing to fail on
    ((result("b.jpg", resize_error=1),), "diverged", False, False),  # one level: close
    ((result("b.jpg", resize_error=1),), "close", False, True),
    ((result("t.jpg", logit_swap=0.05),), "diverged", False, False),  # a tie is not a divergence
    ((result("t.jpg", logit_swap=0.05),), "tie", False, True),
    ((result("b.jpg", resize_error=40),), "diverged", False, True),
    ((result("a.jpg"), ImageResult("x.jpg", error="bad", rejected_by="training")), "diverged", False, True),
    ((result("a.jpg"), ImageResult("x.jpg", error="bad", rejected_by="training")), "diverged", True, False),
    ((result("a.jpg"), ImageResult("x.jpg", error="unreadable")), "diverged", False, False),  # failed on both sides
])
def test_the_exit_rule(results, fail_on, allow_rejected, fails):
    assert check_report(*results).fails(fail_on, allow_rejected) is fails


def test_a_run_comparison_keeps_the_fields_earlier_readers_used():
    report = RunComparison(summary=summary(result("a.jpg")), spec=SpecInfo("spec.toml", TOLERANCES), versions={},
                           run_a="A", run_b="B", side="reference", model="onnx", run_tie_margin=0.5,
                           deployed_b={"ensemble": "classify_opencv", "taps_model": "preprocess_opencv",
                                       "pipeline": "opencv", "url": "u", "protocol": "http"})
    data = report.to_dict()
    assert data["title"] == "Run comparison: B against A (reference side)" and data["runs"] == {"a": "A", "b": "B",
                                                                                                "side": "reference"}
    assert data["reference"]["model"] == "onnx" and data["deployed"]["pipeline"] == "opencv"
    assert data["run"] == {"compared_runs": ["A", "B"], "side": "reference", "incomplete": False, "tie_margin": 0.5}
    assert not report.fails("close")


def test_a_verdict_and_a_stage_are_typed_in_the_summary():
    s = summary(result("b.jpg", resize_error=40))
    assert s.stage(Stage.RESIZE).verdict is Verdict.DIVERGED and s.first_divergent_stage is Stage.RESIZE
