"""The files of a ``harness layers`` run: layers.json (the result's ``to_dict``), layers.csv
(one row per layer and execution), layers.md, layers.html and layers.png (relative RMS error
against depth, one line per execution, log scale: the picture people look for)."""

from __future__ import annotations

import csv
import html
import io
import math
from pathlib import Path
from typing import Sequence

from harness.files import strict_json, write_atomic
from harness.layers.compare import LayerRow, LayersResult, PairResult, fmt, pair_line
from harness.names import csv_text, markdown_code, markdown_text
from harness.report.formats import JobReports
from harness.report.html import STYLE

CSV_FIELDS = ("execution", "depth", "node", "op_type", "max_abs", "mean_abs", "rel_rms", "cosine",
              "nan", "inf", "reference_nonfinite", "worst_image", "verdict")
PLOT_FLOOR = 1e-9
"""Where an exactly equal layer is drawn on the log-scale plot (it has no logarithm)."""


def layers_reports(command: str = "") -> JobReports:
    """What ``harness layers`` writes (:class:`~harness.report.formats.JobReports`): layers.json,
    .csv, .md and .html, and with every run layers.png, the plot the pages show."""

    def json_file(result: LayersResult, directory: Path) -> dict[str, Path]:
        write_atomic(directory / "layers.json", strict_json(result.to_dict(), indent=1) + "\n")
        return {"json": directory / "layers.json"}

    def csv_file(result: LayersResult, directory: Path) -> dict[str, Path]:
        table = io.StringIO()
        writer = csv.writer(table)
        writer.writerow(CSV_FIELDS)
        for pair in result.pairs:
            for row in pair.rows:
                d = row.to_dict()
                writer.writerow([csv_text(pair.other), *(csv_text(v) if isinstance(v, str) else v
                                                         for v in (d[k] for k in CSV_FIELDS[1:]))])
        write_atomic(directory / "layers.csv", table.getvalue())
        return {"csv": directory / "layers.csv"}

    def md_file(result: LayersResult, directory: Path) -> dict[str, Path]:
        write_atomic(directory / "layers.md", markdown(result, command))
        return {"md": directory / "layers.md"}

    def html_file(result: LayersResult, directory: Path) -> dict[str, Path]:
        write_atomic(directory / "layers.html", to_html(result, command, "layers.png"))
        return {"html": directory / "layers.html"}

    def png_file(result: LayersResult, directory: Path) -> dict[str, Path]:
        write_atomic(directory / "layers.png", plot(result))
        return {"png": directory / "layers.png"}

    return JobReports("layers", "layers", ("json", "csv", "md", "html"),
                      {"json": json_file, "csv": csv_file, "md": md_file, "html": html_file}, extra=png_file)


LAYERS_REPORTS = layers_reports()


def write_layers_report(directory: Path, result: LayersResult, command: str = "",
                        formats: Sequence[str] | None = None) -> dict[str, Path]:
    """Write every file (or those of ``formats``, and the plot) into ``directory`` (created);
    returns {kind: path}."""
    return layers_reports(command).write(result, directory, formats)


def _rows(pair: PairResult, only_interesting: bool) -> list[LayerRow]:
    if not only_interesting or len(pair.rows) <= 40:
        return list(pair.rows)
    # Long models: the first divergent layer, its neighbours, the worst ten and the output.
    first = next((i for i, r in enumerate(pair.rows) if r.verdict.value == "diverged"), None)
    keep = set(range(max(0, first - 3), min(len(pair.rows), first + 4))) if first is not None else set()
    keep |= {i for i, _ in sorted(enumerate(pair.rows), key=lambda x: -x[1].rel_rms)[:10]}
    keep |= {0, len(pair.rows) - 1}
    return [pair.rows[i] for i in sorted(keep)]


HEAD = ("depth", "layer", "op", "max abs", "mean abs", "rel RMS", "cosine", "NaN", "Inf", "worst image",
        "verdict")


def _cells(r: LayerRow) -> list[str]:
    return [str(r.depth), r.node, r.op_type, fmt(r.max_abs), fmt(r.mean_abs), fmt(r.rel_rms),
            f"{r.cosine:.6f}", str(r.nan), str(r.inf), r.worst_image, r.verdict.value]


def _markdown_cells(r: LayerRow) -> list[str]:
    """:func:`_cells` for a Markdown table: the layer's and the image's names as code."""
    cells = _cells(r)
    cells[1], cells[9] = markdown_code(cells[1]), markdown_code(cells[9])
    return cells


def markdown(result: LayersResult, command: str = "") -> str:
    lines = [f"# Layers: {', '.join(result.executions)}", "",
             f"Model `{result.model}`, {result.images} images"
             + (f" ({len(result.failed)} unreadable)" if result.failed else "")
             + f"; a layer is close while its relative RMS error stays within {result.tolerance.rel_rms} on every image.",
             "", f"**First divergent layer: {result.first_divergent_layer or 'none'}** (verdict {result.verdict.value})", ""]
    if command:
        lines += [f"`{command}`", ""]
    lines += [f"- {pair_line(p)}" for p in result.pairs] + ["", "![error against depth](layers.png)", ""]
    for pair in result.pairs:
        shown = _rows(pair, True)
        lines += [f"## {pair.other} vs {pair.reference}", ""]
        if len(shown) < len(pair.rows):
            lines += [f"{len(shown)} of {len(pair.rows)} layers shown (every one is in layers.csv).", ""]
        lines += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(_markdown_cells(r)) + " |" for r in shown]
        if pair.unmatched:
            lines += ["", f"Unmatched (no output in {pair.other}): " + ", ".join(f"`{n}`" for n in pair.unmatched)]
        lines.append("")
    if result.unmatched_modules:
        lines += [f"torch modules with no ONNX layer: {len(result.unmatched_modules)} (identity paddings, dropout)", ""]
    if result.failed:
        lines += ["## Unreadable files", ""] + [f"- {markdown_code(i)}: {markdown_text(r)}" for i, r in result.failed] + [""]
    if result.skipped:
        lines += ["## Skipped entries (not images)", ""] + [f"- {markdown_code(i)}: {markdown_text(r)}"
                                                           for i, r in result.skipped] + [""]
    return "\n".join(lines)


def to_html(result: LayersResult, command: str, png: str) -> str:
    e = html.escape
    parts = [f"<!doctype html><meta charset=utf-8><title>Layers</title><style>{STYLE}</style>",
             f"<h1>Layers: {e(', '.join(result.executions))}</h1>",
             f"<p>Model <code>{e(result.model)}</code>, {result.images} images. A layer is close while its relative "
             f"RMS error stays within {result.tolerance.rel_rms} on every image.</p>",
             f"<p><b>First divergent layer: <span class={result.verdict.value}>"
             f"{e(result.first_divergent_layer or 'none')}</span></b></p>"]
    if command:
        parts.append(f"<p><code>{e(command)}</code></p>")
    parts.append("<ul>" + "".join(f"<li>{e(pair_line(p))}</li>" for p in result.pairs) + "</ul>")
    parts.append(f'<img alt="relative RMS error against depth" src="{e(png)}" style="max-width:100%">')
    for pair in result.pairs:
        shown = _rows(pair, True)
        parts.append(f"<h2>{e(pair.other)} vs {e(pair.reference)}</h2>")
        if len(shown) < len(pair.rows):
            parts.append(f"<p class=note>{len(shown)} of {len(pair.rows)} layers shown (all in layers.csv).</p>")
        parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in HEAD) + "</tr>")
        for r in shown:
            cells = _cells(r)
            parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells[:-1])
                         + f"<td class={r.verdict.value}>{e(cells[-1])}</td></tr>")
        parts.append("</table>")
        if pair.unmatched:
            parts.append(f"<p class=note>Unmatched: {e(', '.join(pair.unmatched))}</p>")
    return "\n".join(parts) + "\n"


def plot(result: LayersResult) -> bytes:
    """layers.png: each execution's relative RMS error (worst image) against the layer's depth,
    log scale, the tolerance dashed and the first divergent layer marked."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    top = PLOT_FLOOR
    for pair in result.pairs:
        xs = [r.depth for r in pair.rows]
        ys = [max(r.rel_rms, PLOT_FLOOR) if math.isfinite(r.rel_rms) else math.nan for r in pair.rows]
        finite = [y for y in ys if not math.isnan(y)]
        top = max([top, *finite])
        ax.plot(xs, ys, marker=".", linewidth=1, label=f"{pair.other} vs {pair.reference}")
        nonfinite = [r.depth for r in pair.rows if not math.isfinite(r.rel_rms)]
        if nonfinite:  # inf/NaN: drawn at the top, as red crosses
            ax.scatter(nonfinite, [1e3] * len(nonfinite), marker="x", color="#b00",
                       label=f"{pair.other}: NaN/Inf or overflow")
        if pair.first_divergent_layer:
            depth = next(r.depth for r in pair.rows if r.node == pair.first_divergent_layer)
            ax.axvline(depth, color="#b00", linewidth=0.8, linestyle=":")
            ax.annotate(pair.first_divergent_layer, (depth, result.tolerance.rel_rms), rotation=90, fontsize=8,
                        xytext=(3, 5), textcoords="offset points", color="#b00", parse_math=False)
    ax.axhline(result.tolerance.rel_rms, color="#555", linestyle="--", linewidth=0.8, label="tolerance")
    ax.set_yscale("log")
    ax.set_ylim(PLOT_FLOOR / 2, max(top, 1e3) * 3)
    ax.set_xlabel("layer depth (topological order)")
    ax.set_ylabel("relative RMS error (worst image)")
    ax.set_title(f"{result.model}: error against depth, {result.images} images", parse_math=False)  # names: never mathtext
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()
