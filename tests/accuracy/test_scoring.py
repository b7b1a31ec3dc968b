"""harness/compare/top_k_effect.py and accuracy's report on hand-computed cases: no server, no model."""

import json
from pathlib import Path

import numpy as np
import pytest

from harness.accuracy import (
    REFERENCE,
    Dataset,
    Predictions,
    Sample,
    evaluate,
    mcnemar_exact,
    render_markdown,
    top_k_classes,
    write_report,
)
from harness.accuracy.job import score
from harness.compare.top_k_effect import ensemble
from harness.results import AccuracyRun, ReferenceInfo, ServerInfo
from harness.task import get_task

CLASSES = ["cat", "dog", "fox", "owl", "elk", "yak"]


def report(dataset, predictions, classes=CLASSES, tie_margin=0.0, k=5):
    """The report ``harness accuracy`` writes of these predictions (its one scoring, :func:`score`;
    tests/test_accuracy.py's too)."""
    return score(get_task("classification"), dataset, {p.path: p.failed for p in predictions},
                 {"predictions": predictions}, tie_margin, classes, k,
                 models=tuple(str(ensemble(p.path)) for p in predictions[1:]),
                 reference=ReferenceInfo("recipe", "onnx", "opencv"), server=ServerInfo("server", "grpc"),
                 spec="spec.toml", run=AccuracyRun(0.5, 8, "diverged", False, tie_margin, k))


@pytest.mark.parametrize("b, c, p_value", [(1, 6, 0.125), (0, 6, 0.03125), (6, 0, 0.03125), (3, 2, 1.0), (0, 0, 1.0)])
def test_mcnemar_exact_matches_the_binomial_sum(b, c, p_value):
    # p = min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2^(b + c)); e.g. b=1, c=6: 2 * (1 + 7) / 128
    both_right, both_wrong = 4, 3
    reference = np.array([True] * both_right + [True] * b + [False] * c + [False] * both_wrong)
    deployed = np.array([True] * both_right + [False] * b + [True] * c + [False] * both_wrong)
    m = mcnemar_exact(reference, deployed)
    assert (m.b, m.c) == (b, c) and m.p_value == pytest.approx(p_value, abs=1e-12)


def hand_case():
    labels = [0, 0, 0, 1, 1, 2, 2, 2, 1]
    samples = tuple(Sample(f"img{i}", Path(f"img{i}.jpg"), label) for i, label in enumerate(labels))
    reference_top1 = [0, 0, 1, 1, 1, 2, 0, 2, 1]
    dali_top1 = [0, 1, 0, 1, 0, 2, 2, 1]  # img8 failed on dali only
    reference = Predictions(REFERENCE, {s.name: (top, s.label, 3, 4, 5) for s, top in zip(samples, reference_top1)}, {})
    dali_top5 = {s.name: (top, s.label, 3, 4, 5) for s, top in zip(samples, dali_top1)}
    dali_top5["img4"] = (0, 2, 3, 4, 5)  # the label outside the top 5 once
    dali = Predictions("dali", dali_top5, {"img8": "corrupt JPEG"})
    return Dataset(Path("hand.csv"), "csv", samples, tuple(CLASSES)), [reference, dali]


def test_evaluate_on_a_hand_computed_case():
    dataset, predictions = hand_case()
    result = evaluate(dataset, predictions, CLASSES)

    assert result.failed == {"img8": "dali: corrupt JPEG"}
    assert result.outcomes == {"img8": "rejected by deployment"} and result.rejected("deployment") == 1
    assert [s.name for s in result.evaluated] == [f"img{i}" for i in range(8)]
    assert set(result.predictions[REFERENCE]) == set(result.predictions["dali"]) == {f"img{i}" for i in range(8)}
    ref, dep = result.scores
    assert ref.top1 == 6 / 8 and ref.topk == 1.0
    assert ref.recall == pytest.approx((2 / 3 + 1 + 2 / 3) / 3) and ref.precision == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert dep.top1 == 5 / 8 and dep.topk == 7 / 8
    assert dep.recall == pytest.approx((2 / 3 + 1 / 2 + 2 / 3) / 3) and dep.precision == pytest.approx((2 / 3 + 1 / 3 + 1) / 3)
    assert [(c.name, c.images) for c in dep.per_class] == [("cat", 3), ("dog", 2), ("fox", 3)]
    assert dep.flips == 5 and dep.flip_rate == 5 / 8
    assert dep.ties == 0 and dep.diverged_flips == 5  # no reference logits: no margin, no tie
    assert (dep.mcnemar.b, dep.mcnemar.c, dep.mcnemar.p_value) == (3, 2, 1.0)
    written = report(dataset, predictions)
    data = written.to_dict()
    assert data["effect"]["paths"][1]["diff_points"]["top1"] == pytest.approx(-12.5)
    assert data["run"]["top_k"] == 5 and data["effect"]["paths"][1]["top5"] == 7 / 8
    assert written.effect.any_changes() and written.any_rejected()
    row = next(line for line in render_markdown(written).splitlines() if line.startswith("| `classify_dali`"))
    assert row == ("| `classify_dali` | 62.50% | -12.50 | 87.50% | -12.50 | 61.11% | -16.67 | 66.67% | -11.11 "
                   "| 62.50% (5/8) | 62.50% (5/8; 0 ties) | 3/2, p = 1 |")


def test_top_k_is_general():
    """k = 2: the label must be among the two best classes; the JSON and the table say top-2."""
    dataset, predictions = hand_case()
    result = evaluate(dataset, predictions, CLASSES, k=2)
    ref, dep = result.scores
    assert result.k == 2 and ref.topk == 1.0 and dep.topk == 7 / 8  # the label is second in every row but img4's
    assert all(len(top) == 2 for top in result.predictions["dali"].values())
    written = report(dataset, predictions, k=2)
    data = written.to_dict()
    paths = data["effect"]["paths"]
    assert data["run"]["top_k"] == 2 and "top2" in paths[0] and "top5" not in paths[0]
    assert "top2" in paths[1]["diff_points"] and all("top2" in image for image in data["effect"]["images"])
    assert "| path | top-1 | diff | top-2 | diff |" in render_markdown(written)


def test_ties_are_labelled_from_the_reference_logits():
    """img0's deployed top-1 is 0.3 logits behind the reference's: a tie at a 0.5 margin, a divergence at 0.1."""
    samples = (Sample("img0", Path("img0.jpg"), 0), Sample("img1", Path("img1.jpg"), 1))
    logits = {"img0": np.array([2.0, 1.7, 0.0, 0, 0, 0], np.float32), "img1": np.array([0, 3.0, 0, 0, 0, 0], np.float32)}
    reference = Predictions(REFERENCE, {n: top_k_classes(x[None])[0] for n, x in logits.items()}, {}, logits)
    dali = Predictions("dali", {"img0": (1, 0, 2, 3, 4), "img1": (1, 0, 2, 3, 4)}, {})
    dataset = Dataset(Path("ties.csv"), "csv", samples, tuple(CLASSES))
    tie = evaluate(dataset, [reference, dali], CLASSES, tie_margin=0.5).scores[1]
    assert (tie.flips, tie.ties, tie.diverged_flips) == (1, 1, 0)
    assert tie.flip_verdicts["img0"][0] == "tie" and tie.flip_verdicts["img0"][1] == pytest.approx(0.3, abs=1e-6)
    diverged = evaluate(dataset, [reference, dali], CLASSES, tie_margin=0.1)
    assert diverged.scores[1].flip_verdicts["img0"][0] == "diverged"
    written = report(dataset, [reference, dali], tie_margin=0.5)
    assert written.effect.any_changes(ties=True) and not written.effect.any_changes(ties=False)
    assert "dog (tie, margin 0.3)" in render_markdown(written)


def test_a_dataset_where_every_image_failed_is_reported_not_scored():
    samples = (Sample("a.jpg", Path("a.jpg"), 1), Sample("b.jpg", Path("b.jpg"), 2))
    reference = Predictions(REFERENCE, {}, {"a.jpg": "not an image", "b.jpg": "not an image"})
    dali = Predictions("dali", {"a.jpg": (1, 2, 3, 4, 5)}, {"b.jpg": "not an image"})
    result = evaluate(Dataset(Path("all_bad.csv"), "csv", samples, ("x", "y", "z")), [reference, dali], ["x", "y", "z"])
    assert result.evaluated == () and list(result.failed) == ["a.jpg", "b.jpg"]
    assert all(s.top1 is None and s.flip_rate is None for s in result.scores)
    assert result.outcomes == {"a.jpg": "rejected by training", "b.jpg": "failed"}
    written = report(Dataset(Path("all_bad.csv"), "csv", samples, ("x", "y", "z")), [reference, dali], ["x", "y", "z"])
    assert written.effect is None and written.to_dict()["effect"] is None and written.verdict == "nothing classified"
    assert "## Failed images, excluded from every path (2)" in render_markdown(written)


def test_write_report_writes_strict_json_and_markdown(tmp_path):
    dataset, predictions = hand_case()
    json_path, markdown_path = write_report(tmp_path, report(dataset, predictions))
    data = json.loads(json_path.read_text())
    assert data["task"] == "classification" and [p["path"] for p in data["effect"]["paths"]] == [REFERENCE, "dali"]
    assert data["deployed"] == {"pipelines": ["dali"], "models": ["classify_dali"], "url": "server", "protocol": "grpc"}
    assert data["reference"] == {"recipe": "recipe", "model": "onnx", "recipe_name": "opencv"}
    assert markdown_path.read_text().startswith("# Effect on a labeled set (classification): the deployed preprocessing")
