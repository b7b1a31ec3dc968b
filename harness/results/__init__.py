"""The typed run model: what a run compared against what, and what it found, as frozen
dataclasses. The JSON, Markdown and HTML writers read these objects; report.json (and
accuracy.json, diagnosis.json) is derived from them by ``to_dict``, never the reverse.

- :class:`ReferenceInfo`, :class:`ServerInfo`, :class:`DeployedInfo`, :class:`SpecInfo`:
  the two sides and the spec, shared by every job.
- :class:`StageStats`, :class:`Flip`, :class:`ImageIssue`, :class:`CheckSummary`: a check's
  (or a comparison's) results over every image, frozen from
  :class:`harness.compare.aggregate.RunSummary`.
- :class:`CheckRun`, :class:`CheckReport`: ``harness check``; :class:`RunComparison`:
  ``harness compare``.

Modules: :mod:`~harness.results.sides`, :mod:`~harness.results.summary` (with
:mod:`~harness.results.hints`, the ``why`` of a diverged stage), :mod:`~harness.results.reports`;
everything is importable from here.
"""

from harness.results.reports import CheckReport, CheckRun, RunComparison, StageReport
from harness.results.sides import DeployedInfo, ReferenceInfo, ServerInfo, SpecInfo, Versions
from harness.results.summary import CheckSummary, Flip, ImageIssue, Metrics, MetricSummary, StageStats

__all__ = ["CheckReport", "CheckRun", "CheckSummary", "DeployedInfo", "Flip", "ImageIssue", "MetricSummary", "Metrics",
           "ReferenceInfo", "RunComparison", "ServerInfo", "SpecInfo", "StageReport", "StageStats", "Versions"]
