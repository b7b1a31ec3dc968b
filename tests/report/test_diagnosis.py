"""harness/report/diagnosis.py and harness/diagnose/conclusion.py on a diagnosis built by hand
from per-image outcomes (the data the search produces): no server, no model."""

import json
import math

from harness.diagnose import Cause, Diagnosis, Evaluation, Hypothesis, ImageOutcome, Round
from harness.diagnose.conclusion import combined_recommendation, conclude
from harness.report.diagnosis import render_markdown, write_diagnosis
from harness.results import CombinedChange, DiagnosisReport, ImageIssue, ReferenceInfo, ServerInfo
from harness.stage import STAGES, Stage
from harness.verdict import Verdict

ANTIALIAS = Hypothesis("antialias off", "resize antialias", {"resize": {"antialias": False}})


def outcome(diverged_from: Stage | None = None, error: float = 0.0, flipped: bool = False) -> ImageOutcome:
    """Every stage close before ``diverged_from``, diverged from it on (with ``error``), the top-1 kept or not."""
    verdicts, errors = {}, {}
    for stage in STAGES[:-1]:
        bad = diverged_from is not None and STAGES.index(stage) >= STAGES.index(diverged_from)
        verdicts[stage], errors[stage] = (Verdict.DIVERGED.value, error) if bad else (Verdict.CLOSE.value, 0.01)
    verdicts[Stage.TOPK] = Verdict.DIVERGED.value if flipped else Verdict.CLOSE.value
    errors[Stage.TOPK] = float(flipped)
    return ImageOutcome(verdicts, errors)


def hand_diagnosis() -> Diagnosis:
    baseline = Evaluation("as specified (baseline)", "-", {0: outcome(Stage.RESIZE, 3.0, flipped=True),
                                                          1: outcome(Stage.RESIZE, 2.0), 2: outcome()})
    chosen = Evaluation(ANTIALIAS.name, ANTIALIAS.culprit, {i: outcome() for i in range(3)}, ANTIALIAS, (),
                        changes=(("resize.antialias", True, False),))
    rejected = Evaluation("interpolation cubic", "resize interpolation", {0: outcome(Stage.RESIZE, 4.0)},
                          Hypothesis("interpolation cubic", "resize interpolation"), (),
                          "rejected: no better on the 8 screening images (those that diverged first)",
                          baseline=baseline.subset([0]))
    rounds = (Round(1, baseline, Stage.RESIZE, (chosen, rejected), chosen, True),)
    cause = Cause(ANTIALIAS, 1, (("resize.antialias", True, False),), 1, 0.25, baseline,
                  "Set resize.antialias = true in the deployed spec.")
    conclusion = conclude(baseline, rounds, (cause,), chosen, "nothing diverges")
    return Diagnosis(baseline, Stage.RESIZE, rounds, (cause,), chosen, "nothing diverges", conclusion,
                     combined_recommendation((cause,), chosen.first_divergent()))


def hand_report() -> DiagnosisReport:
    return DiagnosisReport(
        hand_diagnosis(), 5, (ImageIssue("bad.jpg", "deployed: truncated JPEG", "rejected by deployment"),
                              ImageIssue("gone.jpg", "unreadable: gone", "failed")), 8,
        ReferenceInfo("torchvision", "pytorch"), "classify_dali", ServerInfo("127.0.0.1:8001", "grpc"),
        CombinedChange({"recipe": "torchvision", "resize": {"antialias": False}},
                       '[reference]\nrecipe = "torchvision"\n\n[reference.resize]\nantialias = false\n'),
        "spec.toml", None, 0.5, {"total": 1.25})


def test_the_conclusion_names_the_cause_and_what_it_explains():
    d = hand_diagnosis()
    assert d.conclusion.startswith("The divergence first appears at `resize`; **antialias off** (resize antialias) "
                                   "explains it: with it, every stage up to `resize` is equal or close on all 3 images")
    assert "(error at `resize` 1.67 -> 0.01; output 1.67 -> 0.01)" in d.conclusion  # mean RMSE: (3 + 2 + 0.01) / 3
    assert d.recommendation == "Set resize.antialias = true in the deployed spec."
    assert d.explained_by == (d.causes[0],) and d.remaining is None


def test_diagnosis_json_keeps_its_fields():
    data = json.loads(json.dumps(hand_report().to_dict(), allow_nan=False))
    assert list(data)[:11] == ["first_divergent_stage", "conclusion", "recommendation", "explained_by", "causes",
                               "remaining_divergence", "stopped", "baseline", "final", "rounds", "hypotheses"]
    assert data["first_divergent_stage"] == "resize" and data["explained_by"] == "antialias off"
    assert data["causes"][0]["changes"] == [{"key": "resize.antialias", "reference": True,
                                             "deployment_behaves_as": False}]
    assert data["causes"][0]["cost"] == {"top1_flips": 1, "output_error": 0.25}
    assert data["baseline"]["top1_flips"] == 1 and data["baseline"]["verdicts"]["resize"] == {"diverged": 2, "close": 1}
    [chosen, rejected] = data["rounds"][0]["hypotheses"]
    assert chosen["diverged_before"] == 2 and chosen["diverged_after"] == 0 and chosen["stage"] == "resize"
    assert rejected["images"] == 1 and rejected["diverged_before"] == 1  # against the baseline on its own images
    assert data["failed"][0] == {"image": "bad.jpg", "reason": "deployed: truncated JPEG",
                                 "outcome": "rejected by deployment"}
    assert data["combined_change"]["note"] is None and data["deployed"]["ensemble"] == "classify_dali"
    assert hand_report().one_sided() == (hand_report().failed[0],)


def test_diagnosis_md_tables(tmp_path):
    paths = write_diagnosis(tmp_path, hand_report())
    text = paths["markdown"].read_text()
    assert text == render_markdown(hand_report())
    assert "| 1 | antialias off | resize antialias | `resize.antialias` true -> false | 1 | 1 | +0.25 |" in text
    assert "| 1 | antialias off | resize antialias | 2 -> 0 | 1.67 -> 0.01 | 1.67 -> 0.01 | 66.7% -> 100.0% " \
           "| **explains** |" in text
    assert "| 2 | interpolation cubic | resize interpolation | 1 -> 1 | 3 -> 4 |" in text
    assert "1 images were rejected by the deployment but processed by training" in text
    assert "1 images failed on both sides or could not be read, and were left out: `gone.jpg` (unreadable: gone)" in text
    assert "With every change applied: first divergent stage none, top-1 agreement 100.0% on 3 images " \
           "(as specified: 66.7%)." in text
    assert text.rstrip().endswith("Time (s): total 1.2.")
    assert not math.isnan(json.loads(paths["json"].read_text())["tie_margin"])


def test_fingerprint_says_the_preprocessing_in_words():
    from harness.diagnose.advice import fingerprint
    from harness.spec import parse_spec

    stretched = parse_spec({"resize": {"mode": "stretch", "size": [224, 224], "antialias": True},
                            "input": {"channel_order": "BGR"}}).preprocess
    assert fingerprint("torchvision", stretched).startswith("BGR; stretched to 224x224 (linear, antialias, torchvision")
    assert "center crop 224x224" in fingerprint("opencv", parse_spec({}).preprocess)


def test_a_combined_change_a_spec_cannot_say_is_said_so_and_not_written(tmp_path):
    """Issue 59, a small one: with every cause one a spec cannot say (the model in fp16), the
    "combined change in spec terms" held only ``recipe = "torch"`` and --write-spec wrote a spec
    saying nothing: now it says so, and nothing is written."""
    import dataclasses

    from harness.diagnose.job import _write_spec

    note = "The model-precision cause (fp16) cannot be written in a spec: the output stays different."
    change = CombinedChange({"recipe": "torch"}, '[reference]\nrecipe = "torch"\n', note, unchanged=True)
    report = dataclasses.replace(hand_report(), combined_change=change)
    text = render_markdown(report)
    assert "The combined change holds nothing a spec can say: the spec's `[reference]` stays as it is " \
           f"(`--write-spec` writes nothing); {note}" in text
    assert 'recipe = "torch"' not in text and "in spec terms:" not in text
    written, why = _write_spec(tmp_path / "deployed.toml", None, tmp_path / "spec.toml", report.diagnosis, (), change)
    assert written is None and not (tmp_path / "deployed.toml").exists()
    assert why == f"--write-spec: nothing written to {tmp_path / 'deployed.toml'}: no cause found can be said in a " \
                  f"spec ({note})"
    assert "in spec terms:" in render_markdown(hand_report())  # a change a spec says is still shown
