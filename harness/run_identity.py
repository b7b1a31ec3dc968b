"""A check run's identity: what must be equal for the results of two runs (two shards) to be
the results of one run. Computed from report.json's content, so that any two report
directories can be compared, wherever they were written.

It holds the spec's content (not the path it was read from, which differs from machine to
machine), the reference (recipe and model), the deployment (the server, the model and how its
stages were read), the options that judge the images (fail-on, tie margin, top-k, isolation,
rejections) and the versions of everything that computed (the packages and the server). An
embedded server is one deployment whatever port it was given: it serves this checkout's
repository, whose content the spec and the deployment's signature already stand for.
"""

from __future__ import annotations

import re

RUN_OPTIONS = ("fail_on", "isolated", "tie_margin", "scores_kind", "top_k", "allow_rejected")
"""report.json's ``run`` fields that change what a run reports (not its timing)."""


def run_identity(report: dict) -> dict:
    """The identity of the check run whose report.json is ``report`` (a dict)."""
    deployed = {**report["deployed"], "url": embedded_as_one(report["deployed"]["url"])}
    if "deployment" in deployed:
        # What the server told discovery is the identity; the replay's counts are results.
        deployed["deployment"] = {k: v for k, v in deployed["deployment"].items() if k not in ("found", "replay")}
    return {"spec": {k: v for k, v in report["spec"].items() if k != "source"},
            "reference": report["reference"],
            "deployment": deployed,
            "options": {k: report["run"].get(k) for k in RUN_OPTIONS},
            "versions": report["versions"]}


def embedded_as_one(url: str) -> str:
    """``embedded server (127.0.0.1:PORT)`` without its port (see the module)."""
    return re.sub(r"^embedded server \(.*\)$", "embedded server", url)


def first_difference(a, b, path: str = "") -> str | None:
    """Where two identities (or any JSON values) first differ, as ``key.key: A vs B``; None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}{key}: {_short(a.get(key, 'missing'))} vs {_short(b.get(key, 'missing'))}"
            found = first_difference(a[key], b[key], f"{path}{key}.")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{path}{i}."))), None)
    if a != b:
        return f"{path.rstrip('.')}: {_short(a)} vs {_short(b)}"
    return None


def _short(value, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
