"""The report as one plain dict: run summary, what was compared, spec, versions."""

from __future__ import annotations

import dataclasses
import math
import platform
from importlib import metadata

from harness.compare.tolerance import Tolerance, Verdict
from harness.stage import Stage

STAGE_HINTS = {
    Stage.DECODE: "JPEG decoding: chroma upsampling (decode.fancy_upsampling), IDCT (decode.fast_idct), "
              "EXIF orientation (decode.exif_orientation), or a different decoder library",
    Stage.RESIZE: "resize: interpolation, antialias, output-size rounding (resize.size_rounding), resize on uint8 vs "
              "float, or shorter-side vs stretch (resize.*)",
    Stage.CROP: "crop: size or offset rounding (crop.size, crop.offset_rounding), or a different resize mode upstream",
    Stage.INPUT: "normalization: mean/std scale (normalize.pixel_range, mean, std), channel order (input.channel_order)",
    Stage.OUTPUT: "the model itself: precision (TensorRT fp16), runtime, or a different model file",
    Stage.TOPK: "prediction changes follow from the earlier stages",
}
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


def build_report(summary: dict, *, spec, tolerances: dict[str, Tolerance], reference: dict, deployed: dict,
                 run: dict, versions: dict) -> dict:
    """The report dict; ``summary`` is :meth:`RunSummary.to_dict`."""
    from harness.spec import to_table

    report = dict(summary)
    for stage in report["stages"]:
        stage["why"] = explain(stage)
    report["verdict"] = Verdict.worst(Verdict(s["verdict"]) for s in report["stages"]).value if report["stages"] else None
    report["reference"] = reference
    report["deployed"] = deployed
    report["spec"] = {
        "source": spec.source,
        "deployed": to_table(spec.preprocess),
        "reference": {"recipe": spec.reference.recipe, **to_table(spec.reference.preprocess)},
        "tolerances": {k: dataclasses.asdict(v) for k, v in tolerances.items()},
    }
    report["versions"] = versions
    report["run"] = run
    return report


def explain(stage: dict) -> str | None:
    """One sentence on where a diverged stage's error comes from (from the isolated run)."""
    if stage["verdict"] != "diverged":
        return None
    iso = stage.get("isolated_verdict")
    if iso == "diverged":
        where = "this stage adds the error by itself (it diverges even when fed the reference's previous stage)"
    elif iso in ("equal", "close"):
        where = f"this stage alone is {iso} when fed the reference's previous stage: it inherits the error from earlier stages"
    else:
        where = "no isolated run for this stage"
    return f"{where}. Usual causes: {STAGE_HINTS.get(stage['name'], '')}."


def json_safe(value):
    """Infinity and NaN as strings, so report.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
