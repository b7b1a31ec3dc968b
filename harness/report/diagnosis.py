"""diagnosis.json and diagnosis.md."""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.data import json_safe
from harness.report.markdown import fmt


def hypothesis_row(e, baseline, focus: str) -> dict:
    stage = focus or "output"
    baseline = e.baseline or baseline  # on the same images
    return {
        "hypothesis": e.name,
        "culprit": e.culprit,
        "status": e.status,
        "changes": [{"key": k, "reference": a, "hypothesis": b} for k, a, b in e.changes],
        "recipe": e.hypothesis.recipe if e.hypothesis else None,
        "images": e.images,
        "stage": stage,
        "diverged_before": baseline.diverged(stage),
        "diverged_after": e.diverged(stage),
        "error_before": baseline.error(stage),
        "error_after": e.error(stage),
        "output_error_before": baseline.error("output"),
        "output_error_after": e.error("output"),
        "top1_agreement_before": baseline.top1_agreement(),
        "top1_agreement_after": e.top1_agreement(),
        "first_divergent_after": e.first_divergent(),
    }


def diagnosis_dict(d, meta: dict) -> dict:
    b = d.baseline
    return {
        "first_divergent_stage": d.first_divergent,
        "conclusion": d.conclusion,
        "recommendation": d.recommendation,
        "explained_by": d.explained_by.name if d.explained_by else None,
        "baseline": {
            "images": b.images,
            "verdicts": {s: dict(c) for s, c in b.verdicts.items() if c},
            "errors": {s: b.error(s) for s in b.errors if b.errors[s]},
            "top1_agreement": b.top1_agreement(),
        },
        "hypotheses": [hypothesis_row(e, b, d.first_divergent) for e in d.ranked],
        **meta,
    }


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1%}"


def render(diagnosis: dict) -> str:
    stage = diagnosis["first_divergent_stage"] or "output"
    lines = ["# Diagnosis", "", diagnosis["conclusion"], ""]
    if diagnosis["recommendation"]:
        lines += [f"**Recommended change:** {diagnosis['recommendation']}", ""]
    if diagnosis.get("failed"):
        lines += [f"{len(diagnosis['failed'])} images failed on the server and were left out: "
                  + ", ".join(f"{f['image']} ({f['reason']})" for f in diagnosis["failed"]), ""]
    lines += [f"Hypotheses, ranked by images still diverged up to `{stage}`, then its error (mean RMSE per image; "
              "inf = a different shape), then the output's:", "",
              f"| # | hypothesis | culprit | diverged up to `{stage}` | error at `{stage}` | output error "
              "| top-1 agreement | status |",
              "|---|---|---|---|---|---|---|---|"]
    for i, h in enumerate(diagnosis["hypotheses"], 1):
        evaluated = h["status"].startswith("evaluated")
        lines.append(
            f"| {i} | {h['hypothesis']} | {h['culprit']} "
            f"| {h['diverged_before']} -> {h['diverged_after'] if h['images'] else '-'} "
            f"| {fmt(h['error_before'])} -> {fmt(h['error_after'])} "
            f"| {fmt(h['output_error_before'])} -> {fmt(h['output_error_after']) if evaluated else '-'} "
            f"| {_pct(h['top1_agreement_before'])} -> {_pct(h['top1_agreement_after']) if evaluated else '-'} "
            f"| {'**explains**' if evaluated and h['hypothesis'] == diagnosis['explained_by'] else h['status']} |")
    lines += ["", f"Images: {diagnosis['baseline']['images']} (on the first {diagnosis['screen_images']} for rejected "
              "hypotheses). The deployed side was read from the server once and reused for every hypothesis.", ""]
    return "\n".join(lines)


def write_diagnosis(out_dir: Path, diagnosis: dict) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "diagnosis.json", "markdown": out_dir / "diagnosis.md"}
    paths["json"].write_text(json.dumps(json_safe(diagnosis), indent=1) + "\n")
    paths["markdown"].write_text(render(diagnosis))
    return paths


__all__ = ["diagnosis_dict", "render", "write_diagnosis"]
