"""accuracy.json and accuracy.md, both from one :class:`~harness.results.AccuracyReport`, whatever the task."""

from __future__ import annotations

from pathlib import Path

from harness.files import strict_json, write_atomic
from harness.names import markdown_row
from harness.report.formats import JobReports
from harness.result import SIDES
from harness.results.accuracy import AccuracyReport

JSON_FILENAME = "accuracy.json"
MARKDOWN_FILENAME = "accuracy.md"
LAYOUTS = {"imagefolder": "ImageFolder", "csv": "CSV", "coco": "COCO JSON", "masks": "a folder of masks",
           "unlabeled": "unlabeled: agreement only"}
"""How accuracy.md names each dataset layout."""


def reading_lines(reference) -> list[str]:
    """The reference's reading (``--reference hf:...``) and its proof, first: an empty list without one."""
    return [f"> Reference {reference.reading}", ""] if reference.reading else []


def render_markdown(report: AccuracyReport) -> str:
    """accuracy.md: the context, the task's effect (its tables), the images left out."""
    data, evaluated = report.dataset, len(report.evaluated)
    labels = {s.label for s in data.samples if s.label is not None}
    effect_paths = getattr(report.effect, "paths", None)
    counted = (f", {effect_paths[0].labeled} labeled boxes" if data.layout == "coco" and effect_paths
               else "" if data.layout == "masks" else f", {len(labels)} labels" if data.labeled else "")
    rejected = "".join(f", {n} of them rejected by {side} only" for side in SIDES if (n := report.rejected(side)))
    lines = [f"# Effect on a labeled set ({report.task}): the deployed preprocessing vs the training reference", "",
             *reading_lines(report.reference),
             f"- Dataset: `{data.source}` ({LAYOUTS[data.layout]}; {len(data.samples)} images{counted})",
             f"- Evaluated: {evaluated} images on every path; {len(report.failed)} left out of every path"
             + rejected + (" (listed below)" if report.failed else ""),
             f"- Reference: {report.reference.recipe}; model: {report.reference.model}",
             f"- Deployed: {', '.join(f'`{m}` ({p})' for p, m in zip(report.paths, report.models))} over "
             f"{report.server.protocol} at {report.server.url}",
             f"- Spec: {report.reference.spec_line(report.spec)}", ""]
    if report.effect is not None:
        lines += report.effect.markdown([s.name for s in report.evaluated])
    if report.failed:
        lines += ["", f"## Failed images, excluded from every path ({len(report.failed)})", "",
                  "| image | outcome | reason |", "|---|---|---|"]
        lines += [markdown_row(name, report.outcomes.get(name, "failed"), reason) for name, reason in report.failed.items()]
    if data.skipped:  # the folder entries that are not images, with why (as check lists them)
        lines += ["", f"## Skipped entries, not images ({len(data.skipped)})", "", "| entry | reason |", "|---|---|",
                  *(markdown_row(s.name, s.reason) for s in data.skipped)]
    return "\n".join(lines) + "\n"


def _json_file(report: AccuracyReport, out_dir: Path) -> dict[str, Path]:
    write_atomic(out_dir / JSON_FILENAME, strict_json(report.to_dict(), indent=1) + "\n")
    return {"json": out_dir / JSON_FILENAME}


def _markdown_file(report: AccuracyReport, out_dir: Path) -> dict[str, Path]:
    write_atomic(out_dir / MARKDOWN_FILENAME, render_markdown(report))
    return {"markdown": out_dir / MARKDOWN_FILENAME}


ACCURACY_REPORTS = JobReports("accuracy", "accuracy", ("json", "md"), {"json": _json_file, "md": _markdown_file},
                              records=("json",), note="Always written: accuracy.json, the run's record (merge reads a "
                              "shard's)")
"""What ``harness accuracy`` writes (:class:`~harness.report.formats.JobReports`), for every task."""


def write_accuracy_files(out_dir: Path, report: AccuracyReport, formats=None) -> dict[str, Path]:
    """``report`` in ``formats`` (None: accuracy.json and accuracy.md; accuracy.json always) in
    ``out_dir`` (created); the files by name (``json``, ``markdown``, or the format)."""
    return ACCURACY_REPORTS.write(report, out_dir, formats)


def write_report(out_dir: Path, report: AccuracyReport) -> tuple[Path, Path]:
    """accuracy.json and accuracy.md in ``out_dir`` (created)."""
    files = write_accuracy_files(out_dir, report)
    return files["json"], files["markdown"]
