"""Report writers: report.json (machine-readable), report.md (people), report.html (plots).

All three read one typed :class:`harness.results.StageReport` (a check, or a comparison of
two runs); report.json is its ``to_dict``. per_image.csv and images.jsonl are streamed by
the run itself (:mod:`harness.check.files`); accuracy and diagnose write their own
(:mod:`harness.accuracy.report`, :mod:`harness.report.diagnosis`), from their report types in
:mod:`harness.results`.
"""

from __future__ import annotations

from pathlib import Path

from harness.files import strict_json, write_atomic
from harness.report.data import versions
from harness.report.html import write_html
from harness.report.markdown import render_markdown
from harness.results import StageReport


def write_reports(out_dir: Path, report: StageReport, visuals=None) -> dict[str, Path]:
    """report.json (strict JSON), report.md and report.html in ``out_dir`` (created), each
    written atomically (:func:`harness.files.write_atomic`: never half a file, never through
    a link); ``visuals`` (a :class:`harness.check.visuals.VisualStore`) adds the worst
    images' heat maps."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    write_atomic(paths["json"], strict_json(report.to_dict(), indent=1) + "\n")
    write_atomic(paths["markdown"], render_markdown(report))
    write_html(paths["html"], report, visuals)
    return paths


__all__ = ["versions", "write_reports", "render_markdown"]
