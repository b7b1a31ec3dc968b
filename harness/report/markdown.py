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


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell (one line, no column breaks)."""
    return " ".join(str(text).split()).replace("|", "\\|")


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
    k = report.get("run", {}).get("top_k", 5)
    ties = report.get("ties", 0)
    flips = len(report.get("flips", ()))
    line = (f"Top-1 agreement: **{agree:.1%}** ({round(agree * n)} of {n} images"
            + (f"; of the {flips} changed, {ties} {'is a tie' if ties == 1 else 'are ties'}" if flips else "")
            + f"); mean top-{k} overlap {m['topk_overlap']['mean']:.3f}; change in the reference top-1's probability: "
            f"mean {m['top1_prob_change']['mean']:+.4f}, furthest from zero {m['top1_prob_change']['worst']:+.4f}.")
    iso = top.get("isolated")
    if iso:
        line += f" With the reference input, the deployed classifier alone agrees on {iso['top1_agree']['mean']:.1%}."
    return line


def rejected_count(report: dict, side: str) -> int:
    return len(report.get("rejected", {}).get(side, ()))


def headline(report: dict) -> str:
    """The verdict in one line: nothing compared, the first divergent stage, or none; then
    one-sided rejections and ties."""
    first = report["first_divergent_stage"]
    if not report["compared"]:
        line = (f"**Nothing was compared**: none of the {report['images']} images could be processed on both sides, "
                "so this run says nothing about the deployment.")
    elif first:
        line = f"**First divergent stage: {first}**"
        per_image = {k: v for k, v in report["first_divergent_per_image"].items() if k != "none"}
        if per_image:
            line += " (first divergent stage per image: " + ", ".join(f"{k} {v}" for k, v in per_image.items()) + ")"
    else:
        line = "**No stage diverged.**"
    for side, other in (("deployment", "training"), ("training", "deployment")):
        n = rejected_count(report, side)
        if n:
            line += (f" **{n} {'image' if n == 1 else 'images'} rejected by {side}** ({other} processes "
                     f"{'it' if n == 1 else 'them'}).")
    ties = report.get("ties", 0)
    if ties:
        line += (f" {ties} top-1 {'change is a tie' if ties == 1 else 'changes are ties'} (within the tie margin "
                 f"of {fmt(report['run'].get('tie_margin'))} logits: not a divergence).")
    return line


def images_line(report: dict) -> str:
    parts = [f"{report['compared']} compared", f"{len(report['failed'])} failed"]
    parts += [f"{rejected_count(report, side)} rejected by {side}" for side in ("deployment", "training")
              if rejected_count(report, side)]
    return f"{report['images']} ({', '.join(parts)})"


def render_markdown(report: dict) -> str:
    d, ref = report["deployed"], report["reference"]
    lines = [f"# {report.get('title') or 'Consistency report: ' + d['ensemble'] + ' vs the training reference'}", ""]
    if report["run"].get("incomplete"):
        lines += [f"> **Incomplete run**: {report['run']['stopped_reason']}. Continue with `--resume`.", ""]
    lines.append(headline(report))
    lines += [
        "",
        f"- Reference: {ref['recipe']}; model: {ref['model']}",
        f"- Deployed: `{d['ensemble']}` at {d['url']} ({d['protocol']}), stages from `{d['taps_model']}`",
        f"- Images: {images_line(report)}",
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
    if report.get("flips"):
        lines += ["", "## Images whose top-1 class changed", "",
                  "A **tie** is a change within the tie margin: the reference's own top-1 was ahead of the deployed "
                  "top-1 by no more than the output's error explains. It is listed, not counted as a divergence.", "",
                  "| image | verdict | reference top-1 | deployed top-1 | reference margin (logits) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_cell(f['image'])} | {'**diverged**' if f['verdict'] == 'diverged' else f['verdict']} "
                  f"| {f['reference_top1']} | {f['deployed_top1']} | {fmt(f['margin'])} |" for f in report["flips"]]
    for side in ("deployment", "training"):
        if rejected_count(report, side):
            lines += ["", f"## Rejected by {side} only", "", "| image | reason |", "|---|---|"]
            lines += [f"| {_cell(f['image'])} | {_cell(f['reason'])} |" for f in report["rejected"][side]]
    if report["failed"]:
        lines += ["", "## Failed images", "", "| image | reason |", "|---|---|"]
        lines += [f"| {_cell(f['image'])} | {_cell(f['reason'])} |" for f in report["failed"]]
    lines += ["", "Metrics are per image, then the worst and the mean over images. Image stages are on the "
              "0-255 scale; `input` is the normalized model input; `output` the logits.", ""]
    return "\n".join(lines)
