"""harness/report/markdown.py (and html.py, report.json) from typed reports built from real
small arrays: no server."""

import json

from harness.report import write_reports
from harness.report.markdown import headline, render_markdown, stage_rows, topk_line
from harness.result import ImageResult
from harness.results import RunComparison, SpecInfo
from tests.runs import TOLERANCES, check_report, result, summary


def test_an_aligned_run_says_no_stage_diverged():
    report = check_report(result("a.jpg"), result("b.jpg", seed=1))
    text = render_markdown(report)
    assert text.startswith("# Consistency report: classify_dali vs the training reference\n")
    assert "**No stage diverged.**" in text and "Where the error comes from" not in text
    assert "- Deployed: `classify_dali` at 127.0.0.1:8001 (grpc), stages from `preprocess_dali_taps`" in text
    assert "- Images: 2 (2 compared, 0 failed)" in text
    assert [row[:3] for row in stage_rows(report)] == [[s, "equal", "2 / 0 / 0"] for s in
                                                        ("decode", "resize", "crop", "input", "output", "topk")]


def test_a_divergence_is_headlined_bold_and_explained():
    report = check_report(result("a.jpg"), result("bad.jpg", resize_error=40))
    assert headline(report) == "**First divergent stage: resize** (first divergent stage per image: resize 1)"
    resize = next(row for row in stage_rows(report) if row[0] == "resize")
    assert resize[:4] == ["resize", "**diverged**", "1 / 0 / 1", "40"] and resize[5] == "40"  # isolated max too
    text = render_markdown(report)
    assert "- **resize**: this stage adds the error by itself" in text
    assert "- **crop**: this stage alone is equal when fed the reference's previous stage" in text


def test_the_top_k_line_uses_the_run_top_k_and_counts_ties():
    report = check_report(result("a.jpg"), result("tie.jpg", logit_swap=0.05))
    line = topk_line(report)
    assert line.startswith("Top-1 agreement: **50.0%** (1 of 2 images; of the 1 changed, 1 is a tie)")
    assert "mean top-3 overlap 1.000" in line  # top_k 3: the two swapped classes stay in the top 3
    assert "1 top-1 change is a tie (within the tie margin of 0.5 logits" in headline(report)
    text = render_markdown(report)
    assert "| `tie.jpg` | tie | 0 | 1 | 0.2 |" in text
    assert "| topk | tie | 1 / 0 / 0 (1 tie) |" in text  # a row of the table: it can fail the run (--fail-on tie)


def test_rejections_failures_and_an_incomplete_run_are_listed():
    report = check_report(result("a.jpg"), ImageResult("cut|x.jpg", error="deployed: truncated\nJPEG", rejected_by="deployment"),
                          ImageResult("gone.jpg", error="unreadable: No such file"), stopped="server stopped")
    text = render_markdown(report)
    assert text.splitlines()[2] == "> **Incomplete run**: server stopped. Continue with `--resume`."
    assert "**1 image rejected by deployment** (training processes it)." in text
    assert "## Rejected by deployment only" in text and "| `cut\\|x.jpg` | deployed: truncated JPEG |" in text
    assert "## Failed images" in text and "| `gone.jpg` | unreadable: No such file |" in text
    assert "- Images: 3 (1 compared, 1 failed, 1 rejected by deployment)" in text


def test_nothing_compared_says_so():
    report = check_report(ImageResult("a.jpg", error="unreadable"))
    assert headline(report).startswith("**Nothing was compared**: none of the 1 images")
    assert "Top-1 agreement" not in render_markdown(report)


def test_a_run_comparison_names_both_runs_and_nothing_it_did_not_run():
    report = RunComparison(summary=summary(result("a.jpg"), result("b.jpg", resize_error=3)),
                           spec=SpecInfo("spec.toml", TOLERANCES), versions={}, run_a="runs/gpu", run_b="runs/cpu",
                           side="deployed", model="pytorch", run_tie_margin=0.5,
                           deployed_b={"ensemble": "classify_dali", "taps_model": "preprocess_dali_taps",
                                       "pipeline": "dali", "url": "127.0.0.1:8001", "protocol": "grpc"})
    text = render_markdown(report)
    assert text.startswith("# Run comparison: runs/cpu against runs/gpu (deployed side)\n")
    assert "- Run A (plays the reference): `runs/gpu`, deployed side; reference model: pytorch" in text
    assert "- Run B (compared with it): `runs/cpu`, deployed side; served by `classify_dali`" in text
    assert "stages from" not in text and "Reference:" not in text


def test_write_reports_writes_strict_json_markdown_and_html(tmp_path):
    report = check_report(result("a.jpg"), result("short.jpg", other_shape=True), result("t.jpg", logit_swap=0.05))
    paths = write_reports(tmp_path / "out", report)
    data = json.loads(paths["json"].read_text())  # strict: inf PSNR written as "inf"
    assert data == json.loads(json.dumps(data, allow_nan=False))
    assert data["stages"][0]["metrics"]["psnr_db"]["worst"] == "inf"
    assert paths["markdown"].read_text() == render_markdown(report)
    html = paths["html"].read_text()
    assert "<h1>Consistency report: classify_dali vs the training reference</h1>" in html
    assert html.count("<img class=histogram ") == 5 and "<code>classify_dali</code>" in html


def test_a_changed_top1_is_named_by_its_class_and_the_reading_comes_first():
    """The "Images whose top-1 class changed" table names each class beside its index when the class
    names are known (--class-names, this repository's classifier); a training definition read from a
    framework is the report's first line."""
    import dataclasses

    from harness.results import ReferenceInfo

    report = check_report(result("a.jpg"), result("swap.jpg", margin=2.0, logit_swap=3.0))
    flip = report.summary.events[0]
    names = tuple(f"class{k}" for k in range(10))
    line = "read from hf:vit (ViTImageProcessor): replays the processor exactly on 2 of 2 photos"
    named = dataclasses.replace(report, classes=names, reference=ReferenceInfo("hf", "onnx", "hf:vit", reading=line))
    text = render_markdown(named)
    assert f"| {flip.reference_top1} class{flip.reference_top1} | {flip.deployed_top1} class{flip.deployed_top1} |" in text
    assert text.split("\n")[2] == f"> Reference {line}"
    assert f"| {flip.reference_top1} | {flip.deployed_top1} |" in render_markdown(report)  # unnamed: the index alone
    # classes named by their indices (harness deploy without --class-names): the index once, not "3 3"
    by_index = render_markdown(dataclasses.replace(report, classes=tuple(str(k) for k in range(10))))
    [row] = [line for line in by_index.splitlines() if "`swap.jpg`" in line]
    assert f"| {flip.reference_top1} | {flip.deployed_top1} |" in row, row
