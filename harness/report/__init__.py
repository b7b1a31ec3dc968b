"""Report writers: report.json (machine-readable), report.md (people), report.html (plots).

All three read one typed :class:`harness.results.StageReport` (a check, or a comparison of
two runs); report.json is its ``to_dict``. per_image.csv and images.jsonl are streamed by
the run itself (:mod:`harness.check.files`); accuracy and diagnose write their own
(:mod:`harness.accuracy.report`, :mod:`harness.report.diagnosis`), from their report types in
:mod:`harness.results`.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.data import json_safe, versions
from harness.report.html import write_html
from harness.report.markdown import render_markdown
from harness.results import StageReport


def write_reports(out_dir: Path, report: StageReport, visuals=None) -> dict[str, Path]:
    """report.json, report.md and report.html in ``out_dir`` (created); ``visuals`` (a
    :class:`harness.check.visuals.VisualStore`) adds the worst images' heat maps."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["json"].write_text(json.dumps(json_safe(report.to_dict()), indent=1) + "\n")
    paths["markdown"].write_text(render_markdown(report))
    write_html(paths["html"], report, visuals)
    return paths


__all__ = ["versions", "write_reports", "render_markdown"]
