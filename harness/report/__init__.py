"""Report writers: report.json (machine-readable), report.md (people), report.html (plots).

All three read one typed :class:`harness.results.StageReport` (a check, or a comparison of
two runs); report.json is its ``to_dict``. per_image.csv and images.jsonl are streamed by
the run itself (:mod:`harness.check.files`); accuracy and diagnose write their own
(:mod:`harness.accuracy.report`, :mod:`harness.report.diagnosis`), from their report types in
:mod:`harness.results`. Every job's formats, ``--format`` and the JUnit XML:
:mod:`harness.report.formats`.

The names below are imported when first used (PEP 562), so that importing
:mod:`harness.report.formats` stays light: the load-test sweep imports it in the Locust
image, which has no OpenCV or Pillow, and preflight in the Triton image.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"versions": "harness.report.data", "render_markdown": "harness.report.markdown",
            "write_reports": "harness.report.stages", "stage_reports": "harness.report.stages",
            "CHECK_REPORTS": "harness.report.stages", "COMPARE_REPORTS": "harness.report.stages",
            "CSV_FILENAME": "harness.report.stages"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness.report' has no attribute {name!r}")
