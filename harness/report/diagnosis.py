"""diagnosis.json and diagnosis.md: the rounds, every cause with its prediction cost, the
combined change, and what remains."""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.data import json_safe
from harness.report.markdown import fmt
from harness.stage import Stage


def hypothesis_row(e, base, focus: Stage | None) -> dict:
    """One hypothesis of a round, against that round's base on the same images."""
    stage = focus or Stage.OUTPUT
    base = e.baseline or base
    return {
        "hypothesis": e.name,
        "culprit": e.culprit,
        "status": e.status,
        "changes": [{"key": k, "reference": a, "hypothesis": b} for k, a, b in e.changes],
        "recipe": e.hypothesis.recipe if e.hypothesis else None,
        "images": e.images,
        "stage": stage,
        "diverged_before": base.diverged(stage),
        "diverged_after": e.diverged(stage),
        "error_before": base.error(stage),
        "error_after": e.error(stage),
        "output_error_before": base.error(Stage.OUTPUT),
        "output_error_after": e.error(Stage.OUTPUT),
        "top1_agreement_before": base.top1_agreement(),
        "top1_agreement_after": e.top1_agreement(),
        "first_divergent_after": e.first_divergent(),
    }


def evaluation_summary(e) -> dict:
    return {
        "images": e.images,
        "first_divergent_stage": e.first_divergent(),
        "verdicts": {s: dict(c) for s, c in e.verdicts.items() if c},
        "errors": {s: e.error(s) for s in e.verdicts if e.errors(s)},
        "top1_agreement": e.top1_agreement(),
        "top1_flips": e.flips(),
        "top1_ties": e.ties(),
    }


def round_dict(r) -> dict:
    return {
        "round": r.number,
        "first_divergent_stage": r.focus,
        "applied_before": [h.name for h in r.base.on_top_of] + ([r.base.hypothesis.name] if r.base.hypothesis else []),
        "base": evaluation_summary(r.base),
        "chosen": r.chosen.name if r.chosen else None,
        "explains": r.explains,
        "hypotheses": [hypothesis_row(e, r.base, r.focus) for e in r.ranked],
    }


def cause_dict(c) -> dict:
    return {
        "cause": c.hypothesis.name,
        "culprit": c.hypothesis.culprit,
        "round": c.round,
        "changes": [{"key": k, "reference": a, "deployment_behaves_as": b} for k, a, b in c.changes],
        "recipe": c.hypothesis.recipe,
        "fp16": c.hypothesis.fp16,
        "cost": {"top1_flips": c.flips, "output_error": c.output_error},
        "without_it": evaluation_summary(c.without),
        "advice": c.advice,
    }


def diagnosis_dict(d, meta: dict) -> dict:
    return {
        "first_divergent_stage": d.first_divergent,
        "conclusion": d.conclusion,
        "recommendation": d.recommendation,
        "explained_by": " + ".join(c.hypothesis.name for c in d.explained_by) or None,
        "causes": [cause_dict(c) for c in d.causes],
        "remaining_divergence": d.remaining,
        "stopped": d.stopped,
        "baseline": evaluation_summary(d.baseline),
        "final": evaluation_summary(d.final),
        "rounds": [round_dict(r) for r in d.rounds],
        "hypotheses": [hypothesis_row(e, d.rounds[0].base, d.first_divergent) for e in d.ranked],
        **meta,
    }


def _or_dash(value, formatted) -> str:
    return "-" if value is None else formatted(value)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


def _changes(c: dict) -> str:
    parts = [f"`{x['key']}` {json.dumps(x['reference'])} -> {json.dumps(x['deployment_behaves_as'])}" for x in c["changes"]]
    if c["recipe"]:
        parts.append(f"recipe -> `{c['recipe']}`")
    if c["fp16"]:
        parts.append("model in fp16")
    return ", ".join(parts)


def render_causes(diagnosis: dict) -> list[str]:
    if not diagnosis["causes"]:
        return []
    lines = ["## Causes, by what each costs in predictions", "",
             "Cost: what comes back when that change alone is undone with every other one applied.", "",
             "| # | cause | culprit | change (training -> as the deployment behaves) | round | top-1 flips | "
             "output error |", "|---|---|---|---|---|---|---|"]
    for k, c in enumerate(diagnosis["causes"], 1):
        cost = c["cost"]
        lines.append(f"| {k} | {c['cause']} | {c['culprit']} | {_changes(c)} | {c['round']} "
                     f"| {'-' if cost['top1_flips'] is None else cost['top1_flips']} "
                     f"| {'-' if cost['output_error'] is None else '+' + fmt(cost['output_error'])} |")
    change = diagnosis.get("combined_change")
    if change:
        lines += ["", "The combined change, in spec terms: the spec's `[reference]` as the deployment behaves "
                  "(`--write-spec` writes it as a spec that extends this one"
                  + (f"; {change['note']}" if change.get("note") else "") + "):", "", "```toml",
                  change["toml"].rstrip(), "```"]
    final = diagnosis["final"]
    lines += ["", f"With every change applied: first divergent stage "
              f"{'`' + final['first_divergent_stage'] + '`' if final['first_divergent_stage'] else 'none'}, "
              f"top-1 agreement {_pct(final['top1_agreement'])} on {final['images']} images "
              f"(as specified: {_pct(diagnosis['baseline']['top1_agreement'])}).", ""]
    return lines


def render_round(r: dict, screen: int) -> list[str]:
    stage = r["first_divergent_stage"]
    applied = ", ".join(r["applied_before"]) or "nothing"
    base = r["base"]
    lines = [f"## Round {r['round']}: first divergent stage `{stage}`", "",
             f"Applied before this round: {applied}. Top-1 agreement {_pct(base['top1_agreement'])}; kept: "
             + (f"**{r['chosen']}** ({'explains' if r['explains'] else 'explains part of'} `{stage}`)"
                if r["chosen"] else "nothing (no hypothesis improves it)") + ".", "",
             f"Hypotheses, ranked by images still diverged up to `{stage}`, then its error (mean RMSE per image; "
             f"inf = a different shape), then the output's; on every image, or on the first {screen} for those not "
             "evaluated on all (the output only where the model ran):", "",
             f"| # | hypothesis | culprit | diverged up to `{stage}` | error at `{stage}` | output error "
             "| top-1 agreement | status |",
             "|---|---|---|---|---|---|---|---|"]
    for i, h in enumerate(r["hypotheses"], 1):
        kept = h["status"].startswith("evaluated") and h["hypothesis"] == r["chosen"]
        status = ("**explains**" if r["explains"] else "**explains part**") if kept else h["status"]
        lines.append(
            f"| {i} | {h['hypothesis']} | {h['culprit']} "
            f"| {h['diverged_before']} -> {h['diverged_after'] if h['images'] else '-'} "
            f"| {fmt(h['error_before'])} -> {fmt(h['error_after'])} "
            f"| {fmt(h['output_error_before'])} -> {_or_dash(h['output_error_after'], fmt)} "
            f"| {_pct(h['top1_agreement_before'])} -> {_pct(h['top1_agreement_after'])} "
            f"| {status} |")
    return lines + [""]


def render(diagnosis: dict) -> str:
    lines = ["# Diagnosis", "", diagnosis["conclusion"], ""]
    if diagnosis["recommendation"]:
        lines += [f"**Recommended change:** {diagnosis['recommendation']}", ""]
    if diagnosis.get("written_spec"):
        lines += [f"Corrected reference spec: `{diagnosis['written_spec']}` (`harness check --spec` it).", ""]
    for outcome in ("rejected by deployment", "rejected by training", "failed"):
        rows = [f for f in diagnosis.get("failed", ()) if f.get("outcome", "failed") == outcome]
        if rows:
            what = {"failed": "failed on both sides or could not be read, and were left out",
                    "rejected by deployment": "were rejected by the deployment but processed by training "
                                              "(a divergence no preprocessing parameter explains)",
                    "rejected by training": "were rejected by training but answered by the deployment "
                                            "(a divergence no preprocessing parameter explains)"}[outcome]
            lines += [f"{len(rows)} images {what}: " + ", ".join(f"{f['image']} ({f['reason']})" for f in rows), ""]
    lines += render_causes(diagnosis)
    for r in diagnosis["rounds"]:
        lines += render_round(r, diagnosis["screen_images"])
    timing = diagnosis.get("timing_seconds")
    lines += [f"Images: {diagnosis['baseline']['images']} compared (the first {diagnosis['screen_images']} for "
              "hypotheses not evaluated on all). The deployed side was read from the server once and reused for every "
              f"hypothesis of every round; rounds stopped: {diagnosis['stopped']}."]
    if timing:
        lines += ["", "Time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timing.items()) + "."]
    return "\n".join(lines) + "\n"


def write_diagnosis(out_dir: Path, diagnosis: dict) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "diagnosis.json", "markdown": out_dir / "diagnosis.md"}
    paths["json"].write_text(json.dumps(json_safe(diagnosis), indent=1) + "\n")
    paths["markdown"].write_text(render(diagnosis))
    return paths


__all__ = ["diagnosis_dict", "render", "write_diagnosis"]
