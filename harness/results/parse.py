"""A check's report.json read back into the typed run model (the inverse of
:meth:`harness.results.CheckReport.to_dict` for what is not folded from the images): what
``harness merge`` takes from the shards besides their images.jsonl."""

from __future__ import annotations

from harness.results.reports import CheckRun
from harness.results.sides import DeployedInfo, ReferenceInfo, ServerInfo, SpecInfo
from harness.stage import Stage
from harness.tolerance import Tolerance


def spec_info(d: dict) -> SpecInfo:
    return SpecInfo(d["source"], {Stage(k): Tolerance(**v) for k, v in d["tolerances"].items()}, d.get("deployed"),
                    d.get("reference"))


def reference_info(d: dict) -> ReferenceInfo:
    return ReferenceInfo(d["recipe"], d["model"], d.get("recipe_name"), d.get("reading"))


def deployed_info(d: dict) -> DeployedInfo:
    deployment = d.get("deployment")
    return DeployedInfo(d["ensemble"], d.get("taps_model"), d["pipeline"], ServerInfo(d["url"], d["protocol"]),
                        tuple(deployment.get("found", ())) if deployment else (), deployment)


def check_run(d: dict) -> CheckRun:
    return CheckRun(d["seconds"], d["tie_margin"], d["fail_on"], d["isolated"], d["top_k"], d["allow_rejected"],
                    d.get("stopped_reason"), d.get("scores_kind", "logits"), d.get("reference_answers_alike", False))
