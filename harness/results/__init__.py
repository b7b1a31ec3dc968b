"""The typed run model: what a run compared against what, and what it found, as frozen
dataclasses. The JSON, Markdown and HTML writers read these objects; report.json (and
accuracy.json, diagnosis.json) is derived from them by ``to_dict``, never the reverse.

- :class:`ReferenceInfo`, :class:`ServerInfo`, :class:`DeployedInfo`, :class:`SpecInfo`:
  the two sides and the spec, shared by every job.
- :class:`StageStats`, :class:`Flip`, :class:`ImageIssue`, :class:`CheckSummary`: a check's
  (or a comparison's) results over every image, frozen from
  :class:`harness.compare.aggregate.RunSummary`.
- :class:`CheckRun`, :class:`CheckReport`: ``harness check``; :class:`RunComparison`:
  ``harness compare``; :class:`DiagnosisReport`: ``harness diagnose``; :class:`AccuracyReport`:
  ``harness accuracy``: every job's report type is here, its writer in
  :mod:`harness.report` (or :mod:`harness.accuracy.report`).

Modules: :mod:`~harness.results.sides`, :mod:`~harness.results.summary` (with
:mod:`~harness.results.hints`, the ``why`` of a diverged stage), :mod:`~harness.results.reports`,
:mod:`~harness.results.diagnosis`, :mod:`~harness.results.accuracy`; everything is importable from here.
"""

from harness.results.accuracy import AccuracyReport, AccuracyRun
from harness.results.diagnosis import CombinedChange, DiagnosisReport
from harness.results.reports import CheckReport, CheckRun, RunComparison, StageReport
from harness.results.sides import DeployedInfo, ReferenceInfo, ServerInfo, SpecInfo, Versions
from harness.results.summary import CheckSummary, Flip, ImageIssue, Metrics, MetricSummary, StageStats

__all__ = ["AccuracyReport", "AccuracyRun", "CheckReport", "CheckRun", "CheckSummary", "CombinedChange", "DeployedInfo",
           "DiagnosisReport", "Flip", "ImageIssue", "MetricSummary", "Metrics", "ReferenceInfo", "RunComparison",
           "ServerInfo", "SpecInfo", "StageReport", "StageStats", "Versions"]
