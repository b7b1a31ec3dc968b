"""report.md: the summary a person reads in a terminal or a pull request."""

from __future__ import annotations

import math

COLUMNS = ("stage", "verdict", "equal / close / diverged", "max abs err (worst)", "mean abs err (mean)",
           "isolated max abs err", "PSNR dB / cosine (worst)")


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def _metric(stats: dict | None, key: str, which: str) -> float | None:
    return (stats or {}).get(key, {}).get(which)


def stage_rows(report: dict) -> list[list[str]]:
    rows = []
    for s in report["stages"]:
        if s["name"] == "topk":
            continue
        m, iso = s["metrics"], s.get("isolated")
        counts = " / ".join(str(s["images"].get(v, 0)) for v in ("equal", "close", "diverged"))
        shape = f" ({m['shape_mismatch']['images']} with another shape)" if "shape_mismatch" in m else ""
        quality = _metric(m, "psnr_db", "worst") if "psnr_db" in m else _metric(m, "cosine", "worst")
        verdict = f"**{s['verdict']}**" if s["verdict"] == "diverged" else s["verdict"]
        rows.append([s["name"], verdict, counts + shape, fmt(_metric(m, "max_abs", "worst")),
                     fmt(_metric(m, "mean_abs", "mean")), fmt(_metric(iso, "max_abs", "worst")), fmt(quality)])
    return rows


def topk_line(report: dict) -> str | None:
    top = next((s for s in report["stages"] if s["name"] == "topk"), None)
    if top is None:
        return None
    m = top["metrics"]
    agree = m["top1_agree"]["mean"]
    n = report["compared"]
    line = (f"Top-1 agreement: **{agree:.1%}** ({round(agree * n)} of {n} images); mean top-5 overlap "
            f"{m['top5_overlap']['mean']:.3f}; change in the reference top-1's probability: mean "
            f"{m['top1_prob_change']['mean']:+.4f}, furthest from zero {m['top1_prob_change']['worst']:+.4f}.")
    iso = top.get("isolated")
    if iso:
        line += f" With the reference input, the deployed classifier alone agrees on {iso['top1_agree']['mean']:.1%}."
    return line


def render_markdown(report: dict) -> str:
    d, ref = report["deployed"], report["reference"]
    first = report["first_divergent_stage"]
    lines = [f"# {report.get('title') or 'Consistency report: ' + d['ensemble'] + ' vs the training reference'}", ""]
    if report["run"].get("incomplete"):
        lines += [f"> **Incomplete run**: {report['run']['stopped_reason']}. Continue with `--resume`.", ""]
    lines.append(f"**First divergent stage: {first}**" if first else "**No stage diverged.**")
    per_image = {k: v for k, v in report["first_divergent_per_image"].items() if k != "none"}
    if per_image:
        lines[-1] += " (first divergent stage per image: " + ", ".join(f"{k} {v}" for k, v in per_image.items()) + ")"
    lines += [
        "",
        f"- Reference: {ref['recipe']}; model: {ref['model']}",
        f"- Deployed: `{d['ensemble']}` at {d['url']} ({d['protocol']}), stages from `{d['taps_model']}`",
        f"- Images: {report['images']} ({report['compared']} compared, {len(report['failed'])} failed)",
        f"- Spec: `{report['spec']['source']}`",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in stage_rows(report)]
    top = topk_line(report)
    if top:
        lines += ["", top]
    why = [(s["name"], s["why"]) for s in report["stages"] if s.get("why")]
    if why:
        lines += ["", "## Where the error comes from", ""]
        lines += [f"- **{name}**: {text}" for name, text in why]
    if report["failed"]:
        lines += ["", "## Failed images", "", "| image | reason |", "|---|---|"]
        lines += [f"| {f['image']} | {f['reason']} |" for f in report["failed"]]
    lines += ["", "Metrics are per image, then the worst and the mean over images. Image stages are on the "
              "0-255 scale; `input` is the normalized model input; `output` the logits.", ""]
    return "\n".join(lines)
