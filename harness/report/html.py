"""report.html: per-stage tables, error histograms, difference heat maps and side-by-side
crops of the worst images, as one self-contained file (plots embedded as PNG)."""

from __future__ import annotations

import base64
import html
import io
import re
import textwrap
import zipfile
from pathlib import Path

import numpy as np

from harness.compare.metrics import HISTOGRAM_EDGES
from harness.files import write_atomic
from harness.formatting import fmt
from harness.report.markdown import COLUMNS, headline, images_line, stage_rows, task_of, topk_line
from harness.results import StageReport, StageStats
from harness.stage import Stage

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; } .diverged { color: #b00; font-weight: bold; }
.close { color: #a60; } .tie { color: #36c; } .equal { color: #070; } figure { display: inline-block; margin: 6px; }
figcaption { font-size: 12px; text-align: center; } .note { color: #555; }
"""


def _png(fig, kind: str, title: str) -> str:
    """The figure as an embedded PNG; ``kind`` (histogram, heatmap, crops) is its class."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return (f'<img class={kind} alt="{html.escape(title)}" '
            f'src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">')


BAR_COLOUR = "#4a7ab5"


def _histogram(stage: StageStats) -> str:
    import matplotlib.pyplot as plt

    counts = np.asarray(stage.histogram, dtype=float)
    labels = [f"<{e:g}" for e in HISTOGRAM_EDGES[1:-1]] + [f">={HISTOGRAM_EDGES[-2]:g}"]
    fig, ax = plt.subplots(figsize=(6.5, 2.4))
    # Counts span many decades, so the y axis is logarithmic. Bars grow from 0.5, not 0:
    # log(0) does not exist, and a bar whose base is masked away is never drawn (the
    # histograms were empty axes). Empty bins get no bar at all.
    shown = counts > 0
    ax.bar(np.flatnonzero(shown), counts[shown] - 0.5, bottom=0.5, color=BAR_COLOUR)
    ax.set_yscale("log")
    ax.set_ylim(0.5, max(1.0, counts.max()) * 2)
    ax.set_xlim(-0.6, len(counts) - 0.4)
    ax.set_xticks(range(len(counts)), labels[: len(counts)], rotation=45, fontsize=7)
    title = f"{stage.stage}: |deployed - reference| over all elements"
    ax.set_title(title, fontsize=9, parse_math=False)
    ax.set_ylabel("elements", fontsize=8)
    return _png(fig, "histogram", title)


def _heatmap(diff: np.ndarray, title: str) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.2, 3.2))
    im = ax.imshow(diff.astype(np.float32), cmap="inferno")
    # Long image names would run into the colour bar; a name is never mathtext ($...$).
    ax.set_title(textwrap.fill(title, 34), fontsize=8, parse_math=False)
    ax.axis("off")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return _png(fig, "heatmap", title)


def _side_by_side(reference: np.ndarray, deployed: np.ndarray, title: str) -> str:
    import matplotlib.pyplot as plt

    diff = np.abs(deployed.astype(np.float32) - reference.astype(np.float32)).mean(axis=2)
    fig, axes = plt.subplots(1, 3, figsize=(8, 2.9))
    for ax, img, name in zip(axes, (reference, deployed), ("reference", "deployed")):
        ax.imshow(img)
        ax.set_title(name, fontsize=8)
        ax.axis("off")
    axes[2].imshow(diff, cmap="inferno")
    axes[2].set_title(f"|difference| (max {diff.max():.1f})", fontsize=8)
    axes[2].axis("off")
    fig.suptitle(title, fontsize=9, parse_math=False)
    return _png(fig, "crops", title)


def _boxes(drawn: np.ndarray, title: str) -> str:
    """A photo with both sides' boxes drawn on it (:func:`harness.detection.draw.draw_comparison`),
    embedded as the PNG it already is (no plot around it: a figure of matplotlib costs about
    0.3 s, a run's report a few), captioned."""
    import cv2

    ok, png = cv2.imencode(".png", cv2.cvtColor(np.ascontiguousarray(drawn, np.uint8), cv2.COLOR_RGB2BGR))
    if not ok:
        return ""
    width = min(drawn.shape[1], 520)
    return (f'<img class=boxes width={width} alt="{html.escape(title)}" '
            f'src="data:image/png;base64,{base64.b64encode(png.tobytes()).decode()}">'
            f"<figcaption>{html.escape(title)}</figcaption>")


def _visuals(stage: Stage, visuals) -> list[str]:
    if visuals is None:
        return []  # (heat maps of an `equal` stage would be one flat colour: the caller skips them)
    figures = []
    for image, path in visuals.worst(stage):
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # gone or damaged: that figure only
            continue
        if stage is Stage.CROP and "reference" in arrays:
            figures.append(_side_by_side(arrays["reference"], arrays["deployed"], image))
        elif "boxes" in arrays:
            figures.append(_boxes(arrays["boxes"], f"{image}: reference (blue) and deployed (orange) boxes"))
        elif "masks" in arrays:
            figures.append(_boxes(arrays["masks"], f"{image}: reference (blue) and deployed (orange) mask contours, "
                                                   "flipped pixels (purple)"))
        elif "diff" in arrays:
            figures.append(_heatmap(arrays["diff"], f"{image}: |difference|"))
    return figures


def _metrics_table(stage: StageStats) -> str:
    """Every metric of a stage: worst and mean over images, cumulative and isolated."""
    rows = ["<table><tr><th>metric</th><th>worst</th><th>mean</th><th>isolated worst</th><th>isolated mean</th></tr>"]
    for name in stage.metrics:
        cells = [fmt(stage.metric(name, which, isolated)) for isolated in (False, True) for which in ("worst", "mean")]
        rows.append(f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    counts = ", ".join(f"{k} {v}" for k, v in stage.images.items())
    return "".join(rows) + f"</table><p class=note>images: {html.escape(counts)}</p>"


_INLINE = re.compile(r"\\([!-/:-@\[-`{-~])|(`+)(.*?[^`])\2(?!`)|(\*\*)")


def _inline(markdown: str) -> str:
    """The Markdown our writers make of a line (:func:`harness.names.markdown_text`'s
    backslash escapes, :func:`~harness.names.markdown_code`'s code spans, ``**bold**``) as
    HTML; every character of the text escaped."""
    out, bold, at = [], False, 0
    for m in _INLINE.finditer(markdown):
        out.append(html.escape(markdown[at:m.start()]))
        escaped, fence, code, star = m.groups()
        if escaped is not None:
            out.append(html.escape(escaped))
        elif fence is not None:
            code = code.replace("\\|", "|")
            out.append(f"<code>{html.escape(code[1:-1] if code.startswith(' ') and code.endswith(' ') else code)}</code>")
        else:
            out.append("</b>" if bold else "<b>")
            bold = not bold
        at = m.end()
    out.append(html.escape(markdown[at:]))
    return "".join(out) + ("</b>" if bold else "")


def write_html(path: Path, report: StageReport, visuals=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    e = html.escape
    summary = report.summary
    parts = [f"<!doctype html><meta charset=utf-8><title>Consistency report</title><style>{STYLE}</style>",
             f"<h1>{e(report.title)}</h1>"]
    if report.stopped_reason:
        parts.append(f"<p class=diverged>Incomplete run: {e(report.stopped_reason)}. Continue with --resume.</p>")
    parts.append(f"<p>{_inline(headline(report))}</p>")
    parts.append("<p>" + "<br>".join(_inline(side) for side in report.sides())
                 + f"<br>Images: {e(images_line(report))}</p>")
    parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr>")
    for row in stage_rows(report):
        verdict = row[1].strip("*")
        cells = [e(row[0]), f"<span class={verdict}>{verdict}</span>", *map(e, row[2:])]
        parts.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    top = topk_line(report)
    if top:
        parts.append(f"<p>{e(top).replace('**', '')}</p>")
    if report.found():
        parts.append("<details open><summary>Deployment found on the server</summary><pre>"
                     + e("\n".join(report.found())) + "</pre></details>")
    result_stage = task_of(report).result_stage
    figures = {stage.stage: _visuals(stage.stage, visuals) if stage.verdict.value != "equal" else []
               for stage in summary.stages}
    # What the task's result looks like (a detector's boxes drawn on the worst photos) is what a
    # reader came for: its section first, the drawings above its numbers.
    drawn = bool(figures.get(result_stage))
    for stage in sorted(summary.stages, key=lambda s: not (drawn and s.stage is result_stage)):
        verdict = stage.verdict.value
        parts.append(f"<h2>{e(stage.stage.value)} <span class={verdict}>{verdict}</span></h2>")
        if stage.why:
            parts.append(f"<p class=note>{e(stage.why)}</p>")
        worst = "<p>Worst images:</p>" + "".join(f"<figure>{f}</figure>" for f in figures[stage.stage])
        if stage.stage is result_stage and figures[stage.stage]:
            parts.append(worst)
        parts.append(_metrics_table(stage))
        if stage.stage is not result_stage and stage.histogram:
            parts.append(_histogram(stage))
        if stage.stage is not result_stage and figures[stage.stage]:
            parts.append(worst)
    for section in task_of(report).sections(report):
        parts.append(f"<h2>{e(section.title)}</h2><p class=note>{_inline(section.note)}</p><table><tr>"
                     + "".join(f"<th>{e(c)}</th>" for c in section.columns) + "</tr>")
        parts += ["<tr>" + "".join(f"<td><span class={e(c)}>{e(c)}</span></td>" if i == section.verdict_column
                                   else f"<td>{e(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                  for row in section.rows]
        parts.append("</table>")
    sections = [(f"Rejected by {side} only", rows) for side, rows in summary.rejected.items()]
    sections += [("Failed images", summary.failed), ("Skipped entries (not inputs)", summary.skipped)]
    for title, rows in sections:
        if not rows:
            continue
        first = "entry" if rows is summary.skipped else "image"
        parts.append(f"<h2>{e(title)}</h2><table><tr><th>{first}</th><th style='text-align:left'>reason</th></tr>")
        parts += [f"<tr><td>{e(f.image)}</td><td style='text-align:left'>{e(f.reason)}</td></tr>" for f in rows]
        parts.append("</table>")
    write_atomic(path, "\n".join(parts) + "\n")
