"""report.md: the summary a person reads in a terminal or a pull request, from a typed
:class:`harness.results.StageReport` (a check, or a comparison of two runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.formatting import fmt
from harness.names import markdown_code, markdown_row, markdown_text
from harness.result import SIDES
from harness.stage import RESULT_STAGES, Stage
from harness.task import Section, Task, get_task
from harness.verdict import Verdict

if TYPE_CHECKING:
    from harness.results import StageReport

COLUMNS = ("stage", "verdict", "equal / close / diverged", "max abs err (worst)", "mean abs err (mean)",
           "isolated max abs err", "PSNR dB / cosine (worst)")


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell (one line, no column breaks)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def task_of(report: StageReport) -> Task:
    """The task a report's run compared (:mod:`harness.task`)."""
    return get_task(report.summary.task)


def stage_rows(report: StageReport) -> list[list[str]]:
    """One row of :data:`COLUMNS` per compared stage, the task's result stage too (a stage
    outside the table has the task's line instead: :func:`topk_line`); ``topk``'s (it can fail
    a run too) has its ties beside the counts, the largest change among the reference's top-k
    probabilities as its errors and the top-1 agreement as its quality."""
    rows, task = [], task_of(report)
    for s in report.summary.stages:
        if s.stage is Stage.TOPK:
            rows.append(_topk_row(s))
            continue
        if s.stage in RESULT_STAGES and not task.result_in_table:
            continue
        if s.stage in RESULT_STAGES and (own := task.result_row(s)) is not None:  # the task says its own cells
            rows.append(own)
            continue
        counts = " / ".join(str(s.count(v)) for v in (Verdict.EQUAL, Verdict.CLOSE, Verdict.DIVERGED))
        ties = s.count(Verdict.TIE)
        counts += f" ({ties} {'tie' if ties == 1 else 'ties'})" if ties else ""
        shape = s.metrics.get("shape_mismatch")
        shape = f" ({shape.images} with another shape)" if shape else ""
        quality = s.metric("psnr_db") if "psnr_db" in s.metrics else s.metric("cosine")
        verdict = f"**{s.verdict.value}**" if s.verdict is Verdict.DIVERGED else s.verdict.value
        rows.append([s.stage.value, verdict, counts + shape, fmt(s.metric("max_abs")), fmt(s.metric("mean_abs", "mean")),
                     fmt(s.metric("max_abs", isolated=True)), fmt(quality)])
    return rows


def _topk_row(s) -> list[str]:
    counts = " / ".join(str(s.count(v)) for v in (Verdict.EQUAL, Verdict.CLOSE, Verdict.DIVERGED))
    ties = s.count(Verdict.TIE)
    counts += f" ({ties} {'tie' if ties == 1 else 'ties'})" if ties else ""
    verdict = f"**{s.verdict.value}**" if s.verdict is Verdict.DIVERGED else s.verdict.value
    agree = s.metric("top1_agree", "mean")
    return ["topk", verdict, counts, fmt(s.metric("topk_prob_change")), fmt(s.metric("topk_prob_change", "mean")),
            fmt(s.metric("topk_prob_change", isolated=True)), "-" if agree is None else f"top-1 {agree:.1%}"]


def topk_line(report: StageReport) -> str | None:
    """The task's paragraph under the stage table (classification: top-1 agreement and top-k overlap)."""
    return task_of(report).summary_line(report)


def section_markdown(section: Section) -> list[str]:
    """A task's table (:meth:`harness.task.Task.sections`) in Markdown."""
    def cell(i: int, text: str) -> str:
        if i in section.name_columns:
            return markdown_code(text)
        return "**diverged**" if i == section.verdict_column and text == Verdict.DIVERGED.value else _cell(text)

    return ["", f"## {section.title}", "", section.note, "",
            "| " + " | ".join(section.columns) + " |", "|" + "---|" * len(section.columns),
            *("| " + " | ".join(cell(i, c) for i, c in enumerate(row)) + " |" for row in section.rows)]


def headline(report: StageReport) -> str:
    """The verdict in one line: nothing compared, the first divergent stage, or none; then
    one-sided rejections and ties."""
    summary = report.summary
    first = summary.first_divergent_stage
    if not summary.compared:
        line = (f"**Nothing was compared**: none of the {summary.images} images could be processed on both sides, "
                "so this run says nothing about the deployment.")
    elif first:
        line = f"**First divergent stage: {first}**"
        per_image = {k: v for k, v in summary.first_divergent_per_image.items() if k != "none"}
        if per_image:
            line += " (first divergent stage per image: " + ", ".join(f"{k} {v}" for k, v in per_image.items()) + ")"
    else:
        line = "**No stage diverged.**"
    for side, other in (("deployment", "training"), ("training", "deployment")):
        n = len(summary.rejected_by(side))
        if n:
            line += (f" **{n} {'image' if n == 1 else 'images'} rejected by {side}** ({other} processes "
                     f"{'it' if n == 1 else 'them'}).")
    return line + task_of(report).headline(report)


def images_line(report: StageReport) -> str:
    summary = report.summary
    parts = [f"{summary.compared} compared", f"{len(summary.failed)} failed"]
    parts += [f"{len(summary.rejected_by(side))} rejected by {side}" for side in SIDES if summary.rejected_by(side)]
    if summary.skipped:
        parts.append(f"{len(summary.skipped)} skipped")
    return f"{summary.images} ({', '.join(parts)})"


def render_markdown(report: StageReport) -> str:
    summary = report.summary
    lines = [f"# {markdown_text(report.title)}", ""]
    if report.reading():
        lines += [f"> Reference {markdown_text(report.reading())}", ""]
    if report.stopped_reason:
        lines += [f"> **Incomplete run**: {markdown_text(report.stopped_reason)}. Continue with `--resume`.", ""]
    lines.append(headline(report))
    lines += ["", *(f"- {side}" for side in report.sides()), f"- Images: {images_line(report)}",
              f"- Spec: {report.spec_line()}", "",
              "| " + " | ".join(COLUMNS) + " |",
              "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in stage_rows(report)]
    top = topk_line(report)
    if top:
        lines += ["", top]
    if report.caveat():
        lines += ["", f"**{markdown_text(report.caveat())}**"]
    if report.found():
        lines += ["", "Deployment found on the server:", "", "```", *report.found(), "```"]
    why = [(s.stage, s.why) for s in summary.stages if s.why]
    if why:
        lines += ["", "## Where the error comes from", ""]
        lines += [f"- **{stage}**: {text}" for stage, text in why]
    for section in task_of(report).sections(report):
        lines += section_markdown(section)
    for side in SIDES:
        if summary.rejected_by(side):
            lines += ["", f"## Rejected by {side} only", "", "| image | reason |", "|---|---|"]
            lines += issue_rows(summary.rejected_by(side))
    if summary.failed:
        lines += ["", "## Failed images", "", "| image | reason |", "|---|---|", *issue_rows(summary.failed)]
    if summary.skipped:
        lines += ["", "## Skipped entries (not inputs)", "", "| entry | reason |", "|---|---|",
                  *issue_rows(summary.skipped)]
    lines += ["", "Metrics are per image, then the worst and the mean over images. Image stages are on the "
              f"0-255 scale; `input` is the normalized model input; `output` {task_of(report).output_note(report)}", ""]
    return "\n".join(lines)


def issue_rows(issues) -> list[str]:
    """Table rows of images not compared: the name as code, the reason as plain text."""
    return [markdown_row(f.image, f.reason) for f in issues]
