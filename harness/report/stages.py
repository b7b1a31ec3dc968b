"""The stage-by-stage report's files: report.json (machine-readable), report.md (people),
report.html (plots), all three read from one typed :class:`harness.results.StageReport` (a
check, or a comparison of two runs), as one :class:`~harness.report.formats.JobReports`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from harness.files import strict_json, write_atomic
from harness.report.formats import JobReports
from harness.report.html import write_html
from harness.report.markdown import render_markdown
from harness.results import StageReport

CSV_FILENAME = "per_image.csv"
"""A check's per-image table, streamed by the run (:mod:`harness.check.files`)."""


def stage_reports(visuals=None, check_run: bool = False) -> JobReports:
    """What a stage-by-stage report writes (:class:`~harness.report.formats.JobReports`): its
    own report.json (strict JSON), report.md and report.html, each written atomically
    (:func:`harness.files.write_atomic`: never half a file, never through a link); ``visuals``
    (a :class:`harness.check.visuals.VisualStore`) adds the worst images' heat maps. A check
    run's (``check_run``: ``harness check`` and ``harness merge``) report.json and per_image.csv
    are its records, always written: ``--resume``, ``merge`` and ``compare`` read them."""

    def json_file(report: StageReport, out_dir: Path) -> dict[str, Path]:
        path = out_dir / "report.json"
        write_atomic(path, strict_json(report.to_dict(), indent=1) + "\n")
        return {"json": path}

    def markdown_file(report: StageReport, out_dir: Path) -> dict[str, Path]:
        path = out_dir / "report.md"
        write_atomic(path, render_markdown(report))
        return {"markdown": path}

    def html_file(report: StageReport, out_dir: Path) -> dict[str, Path]:
        path = out_dir / "report.html"
        write_html(path, report, visuals)
        return {"html": path}

    own = {"json": json_file, "md": markdown_file, "html": html_file}
    if not check_run:
        return JobReports("compare", "report", ("json", "md", "html"), own)
    # per_image.csv is streamed as the images complete: nothing is left to write at the end.
    own["csv"] = lambda report, out_dir: {"csv": out_dir / CSV_FILENAME}
    return JobReports("check", "report", ("json", "md", "html", "csv"), own, records=("json", "csv"),
                      note="Always written, whatever --format says: report.json, per_image.csv, images.jsonl and "
                           "run.json, a check run's records (--resume, merge and compare read them)")


CHECK_REPORTS = stage_reports(check_run=True)
COMPARE_REPORTS = stage_reports()


def write_reports(out_dir: Path, report: StageReport, visuals=None, formats: Sequence[str] | None = None,
                  check_run: bool = False) -> dict[str, Path]:
    """``report`` in ``formats`` (None: report.json, report.md and report.html; with
    ``check_run``, per_image.csv beside them) in ``out_dir`` (created), by :func:`stage_reports`;
    returns the files by name (``json``, ``markdown``, ``html``; any other by its format)."""
    return stage_reports(visuals, check_run).write(report, out_dir, formats)

