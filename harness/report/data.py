"""The report as one plain dict: run summary, what was compared, spec, versions."""

from __future__ import annotations

import dataclasses
import math
import platform
from importlib import metadata

from harness.compare.tolerance import Tolerance, Verdict

STAGE_HINTS = {
    "decode": "JPEG decoding: chroma upsampling (decode.fancy_upsampling), IDCT (decode.fast_idct), "
              "EXIF orientation (decode.exif_orientation), or a different decoder library",
    "resize": "resize: interpolation, antialias, output-size rounding (resize.size_rounding), resize on uint8 vs "
              "float, or shorter-side vs stretch (resize.*)",
    "crop": "crop: size or offset rounding (crop.size, crop.offset_rounding), or a different resize mode upstream",
    "input": "normalization: mean/std scale (normalize.pixel_range, mean, std), channel order (input.channel_order)",
    "output": "the model itself: precision (TensorRT fp16), runtime, or a different model file",
    "topk": "prediction changes follow from the earlier stages",
}
PACKAGES = ("numpy", "opencv-python-headless", "pillow", "torch", "torchvision", "nvidia-dali-cuda120",
            "onnxruntime", "tritonclient", "harness")


def versions(server_metadata: dict | None = None) -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
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
