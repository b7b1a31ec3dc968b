"""Report writers: report.json (machine-readable), report.md (people), report.html (plots).

All read one plain dict built by :func:`harness.report.data.build_report`; per_image.csv
and images.jsonl are streamed by the run itself.
"""

from harness.report.data import build_report, versions
from harness.report.html import write_html
from harness.report.markdown import render_markdown


def write_reports(out_dir, report: dict, visuals=None) -> dict[str, "Path"]:  # noqa: F821
    import json

    from harness.report.data import json_safe

    paths = {"json": out_dir / "report.json", "markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["json"].write_text(json.dumps(json_safe(report), indent=1) + "\n")
    paths["markdown"].write_text(render_markdown(report))
    write_html(paths["html"], report, visuals)
    return paths


__all__ = ["build_report", "versions", "write_reports", "render_markdown"]
