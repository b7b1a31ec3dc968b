"""What every report records beside its results: the versions of what ran, and strict JSON."""

from __future__ import annotations

import math
import platform
from importlib import metadata

PACKAGES = ("numpy", "opencv-python-headless", "pillow", "torch", "torchvision", "onnxruntime", "tritonclient",
            "harness")
"""Packages whose versions a report records, with the DALI wheel the manifest pins (see :func:`packages`)."""


def packages() -> tuple[str, ...]:
    """:data:`PACKAGES` with the DALI wheel named by deploy/versions.toml (one source of truth:
    the pin follows the production Triton release, e.g. nvidia-dali-cuda130)."""
    from harness.manifest import load_manifest

    return (*PACKAGES[:5], load_manifest().dali.wheel, *PACKAGES[5:])


def versions(server_metadata: dict | None = None) -> dict:
    """Python's and each of :func:`packages`' installed version (None: not installed), and the
    server's with ``server_metadata``."""
    out = {"python": platform.python_version()}
    for name in packages():
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if server_metadata:
        out["tritonserver"] = server_metadata.get("version")
    return out


def json_safe(value):
    """Infinity and NaN as strings, so report.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
