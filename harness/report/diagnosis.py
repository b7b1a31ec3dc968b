"""diagnosis.json and diagnosis.md, both from one :class:`~harness.results.DiagnosisReport`: the
rounds, every cause with its prediction cost, the combined change, and what remains."""

from __future__ import annotations

import json
from pathlib import Path

from harness.files import strict_json, write_atomic
from harness.formatting import fmt
from harness.names import markdown_code, markdown_text
from harness.outcome import Outcome
from harness.report.formats import JobReports
from harness.results.diagnosis import (  # the job's types, named by the run model
    Cause,
    DiagnosisReport,
    HypothesisRow,
    Round,
    applied_before,
)

FAILED_OUTCOMES = {
    Outcome.REJECTED_BY_DEPLOYMENT: "were rejected by the deployment but processed by training "
                              "(a divergence no preprocessing parameter explains)",
    Outcome.REJECTED_BY_TRAINING: "were rejected by training but answered by the deployment "
                            "(a divergence no preprocessing parameter explains)",
    Outcome.FAILED: "failed on both sides or could not be read, and were left out",
}


def _or_dash(value, formatted) -> str:
    return "-" if value is None else formatted(value)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


def _changes(c: "Cause") -> str:
    parts = [f"`{key}` {json.dumps(a)} -> {json.dumps(b)}" for key, a, b in c.changes]
    if c.hypothesis.recipe:
        parts.append(f"recipe -> `{c.hypothesis.recipe}`")
    if c.hypothesis.fp16:
        parts.append("model in fp16")
    if c.hypothesis.bgr_images:
        parts.append("image stages in BGR")
    return ", ".join(parts)


def render_causes(report: DiagnosisReport) -> list[str]:
    d = report.diagnosis
    if not d.causes:
        return []
    task = d.baseline.task
    lines = ["## Causes, by what each costs in predictions", "",
             "Cost: what comes back when that change alone is undone with every other one applied.", "",
             f"| # | cause | culprit | change (training -> as the deployment behaves) | round | {task.flip_words} | "
             "output error |", "|---|---|---|---|---|---|---|"]
    for k, c in enumerate(d.causes, 1):
        lines.append(f"| {k} | {c.hypothesis.name} | {c.hypothesis.culprit} | {_changes(c)} | {c.round} "
                     f"| {'-' if c.flips is None else c.flips} "
                     f"| {'-' if c.output_error is None else '+' + fmt(c.output_error)} |")
    change = report.combined_change
    if change.unchanged:
        lines += ["", "The combined change holds nothing a spec can say: the spec's `[reference]` stays as it is "
                  "(`--write-spec` writes nothing)" + (f"; {change.note}" if change.note else ".")]
    else:
        lines += ["", "The combined change, in spec terms: the spec's `[reference]` as the deployment behaves "
                  "(`--write-spec` writes it as a spec that extends this one"
                  + (f"; {change.note}" if change.note else "") + "):", "", "```toml", change.toml.rstrip(), "```"]
    final, stage = d.final, d.final.first_divergent()
    lines += ["", f"With every change applied: first divergent stage {f'`{stage}`' if stage else 'none'}, "
              f"{task.agreement_words} {_pct(final.top1_agreement())} on {final.images} images "
              f"(as specified: {_pct(d.baseline.top1_agreement())}).", ""]
    return lines


def render_round(r: "Round", screen: int) -> list[str]:
    stage, chosen = r.focus, r.chosen.name if r.chosen else None
    applied = ", ".join(applied_before(r)) or "nothing"
    lines = [f"## Round {r.number}: first divergent stage `{stage}`", "",
             f"Applied before this round: {applied}. {r.base.task.agreement_words.capitalize()} "
             f"{_pct(r.base.top1_agreement())}; kept: "
             + (f"**{chosen}** ({'explains' if r.explains else 'explains part of'} `{stage}`)"
                if chosen else "nothing (no hypothesis improves it)") + ".", "",
             f"Hypotheses, ranked by images still diverged up to `{stage}`, then its error (mean RMSE per image; "
             f"inf = a different shape), then the output's; on every image, or on {screen} screening images (those that "
             "diverged first) for those not "
             "evaluated on all (the output only where the model ran):", "",
             f"| # | hypothesis | culprit | diverged up to `{stage}` | error at `{stage}` | output error "
             f"| {r.base.task.agreement_words} | status |",
             "|---|---|---|---|---|---|---|---|"]
    for i, h in enumerate((HypothesisRow.of(e, r.base, r.focus) for e in r.ranked), 1):
        kept = h.status.startswith("evaluated") and h.hypothesis == chosen
        status = ("**explains**" if r.explains else "**explains part**") if kept else h.status
        lines.append(
            f"| {i} | {h.hypothesis} | {h.culprit} "
            f"| {h.diverged_before} -> {h.diverged_after if h.images else '-'} "
            f"| {fmt(h.error_before)} -> {fmt(h.error_after)} "
            f"| {fmt(h.output_error_before)} -> {_or_dash(h.output_error_after, fmt)} "
            f"| {_pct(h.top1_agreement_before)} -> {_pct(h.top1_agreement_after)} "
            f"| {status} |")
    return lines + [""]


DEPLOYMENT_SPEC = "Deployment spec (the training reference as the deployment behaves, --write-spec)"
TRAINING_SPEC = "Training spec (your training as it is, --write-training-spec)"


def render_markdown(report: DiagnosisReport) -> str:
    """diagnosis.md."""
    d = report.diagnosis
    lines = ["# Diagnosis", ""]
    if report.reference.reading:
        lines += [f"> Reference {report.reference.reading}", ""]
    if report.training:
        lines += render_training(report), ""
    lines += [f"Against the spec found: {d.conclusion}" if report.training else d.conclusion, ""]
    if d.check is not None:
        lines += [render_check(report), ""]
    if d.recommendation:
        lines += [f"**Recommended change:** {d.recommendation}", ""]
    if report.fingerprint:
        remains = "" if d.remaining is None else f" (with the causes found; a divergence remains at `{d.remaining}`)"
        lines += [f"The deployment behaves as{remains}: {report.fingerprint}.", ""]
    if report.written_spec:
        lines += [f"{DEPLOYMENT_SPEC}: `{report.written_spec}` (`harness check --spec` it).", ""]
    if report.written_training_spec:
        lines += [f"{TRAINING_SPEC}: `{report.written_training_spec}`.", ""]
    for why in (report.not_written, report.training_not_written):
        if why:
            lines += [f"{why}.", ""]
    if report.scores_kind == "probabilities":
        lines += [f"The deployment answers {report.scores_kind}: output errors and the tie margin "
                  f"({fmt(report.tie_margin)}) are in probability units.", ""]
    for outcome, what in FAILED_OUTCOMES.items():
        rows = [f for f in report.failed if (f.outcome or Outcome.FAILED) == outcome]
        if rows:
            listed = ", ".join(f"{markdown_code(f.image)} ({markdown_text(f.reason)})" for f in rows)
            lines += [f"{len(rows)} images {what}: {listed}", ""]
    if report.skipped:
        listed = ", ".join(f"{markdown_code(s.image)} ({markdown_text(s.reason)})" for s in report.skipped)
        lines += [f"{len(report.skipped)} entries of the folder are not images and were skipped: {listed}", ""]
    lines += render_causes(report)
    if report.found:
        lines += ["Deployment found on the server:", "", "```", *report.found, "```", ""]
    for r in d.rounds:
        lines += render_round(r, report.screen_images)
    lines += [f"Images: {d.baseline.images} compared (the first {report.screen_images} for "
              "hypotheses not evaluated on all). The deployed side was read from the server once and reused for every "
              f"hypothesis of every round; rounds stopped: {d.stopped}."]
    if report.timing_seconds:
        lines += ["", "Time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in report.timing_seconds.items()) + "."]
    return "\n".join(lines) + "\n"


def render_check(report: DiagnosisReport) -> str:
    """Check's verdict on the same images (where the diagnosis started from, and the exit
    status's), and check's comparison against the corrected spec."""
    d = report.diagnosis
    text = (f"**`harness check` on the same images: {d.check.describe()}** (exit status "
            f"{0 if report.passed else 1}, check's rule: {'passed' if report.passed else 'failed'}).")
    if d.after is not None:
        text += f" Against the reference with every cause applied (the corrected spec), check's comparison: {d.after.describe()}."
    return text


def render_training(report: DiagnosisReport) -> str:
    """The training callable's fingerprint, and the callable itself against the deployment."""
    t = report.training
    changes = ", ".join(c.hypothesis.name for c in t.diagnosis.causes) or "none"
    if t.reproduced:
        text = (f"**Training** (`{t.name}`) is reproduced by a spec, {t.exactness()}: {t.in_words()} "
                f"(from the spec's [reference], changed: {changes}). The deployment is diagnosed against that spec.")
    else:
        text = (f"**Training** (`{t.name}`) is not reproduced by any spec of the recipe space: the closest found "
                f"({t.in_words()}; changed: {changes}) leaves it {t.exactness()}. The "
                "deployment is diagnosed against that closest spec, and compared with the callable itself below.")
    c = report.compared
    if c is not None:
        stage = c.first_divergent()
        text += (f" The callable itself against the deployment: first divergent stage "
                 f"{f'`{stage}`' if stage else 'none'}, top-1 agreement {_pct(c.top1_agreement())} on {c.images} images.")
    return text


def _json_file(report: DiagnosisReport, out_dir: Path) -> dict[str, Path]:
    write_atomic(out_dir / "diagnosis.json", strict_json(report.to_dict(), indent=1) + "\n")
    return {"json": out_dir / "diagnosis.json"}


def _markdown_file(report: DiagnosisReport, out_dir: Path) -> dict[str, Path]:
    write_atomic(out_dir / "diagnosis.md", render_markdown(report))
    return {"markdown": out_dir / "diagnosis.md"}


DIAGNOSIS_REPORTS = JobReports("diagnose", "diagnosis", ("json", "md"), {"json": _json_file, "md": _markdown_file})
"""What ``harness diagnose`` writes (:class:`~harness.report.formats.JobReports`)."""


def write_diagnosis(out_dir: Path, report: DiagnosisReport, formats=None) -> dict[str, Path]:
    """diagnosis.json and diagnosis.md (or ``formats``) in ``out_dir`` (created); the files by
    name (``json``, ``markdown``, or the format)."""
    return DIAGNOSIS_REPORTS.write(report, out_dir, formats)
