"""What every report records beside its results: the versions of what ran (strict JSON is
:func:`harness.files.strict_json`)."""

from __future__ import annotations

import platform
from importlib import metadata

from harness.manifest import load_manifest

PACKAGES = ("numpy", "opencv-python-headless", "pillow", "torch", "torchvision", "onnxruntime", "tritonclient",
            "harness")
"""Packages whose versions a report records, with the DALI wheel the manifest pins (see :func:`packages`)."""


def packages() -> tuple[str, ...]:
    """:data:`PACKAGES` with the DALI wheel named by deploy/versions.toml (one source of truth:
    the pin follows the production Triton release, e.g. nvidia-dali-cuda130)."""
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

