"""``harness compare RUN_A RUN_B``: compare the stage tensors two ``check --save-tensors`` runs
saved, offline. For example the GPU deployment's run against the cpu profile's, or today's
server against last release's. Run A plays the reference, run B the deployed side."""

from __future__ import annotations

import json
from pathlib import Path

from harness.check import TENSORS_DIRNAME, ImageTensors, load_image_tensors
from harness.compare.aggregate import RunSummary
from harness.compare.result import ImageResult, one_line
from harness.compare.stages import compare_stages
from harness.compare.ties import default_tie_margin
from harness.compare.tolerance import Tolerance, Verdict
from harness.report import versions, write_reports
from harness.report.data import explain


def _tolerances(run: Path) -> dict[str, Tolerance]:
    saved = json.loads((run / "report.json").read_text())["spec"]["tolerances"]
    return {stage: Tolerance(**values) for stage, values in saved.items()}


def compare_runs(run_a: Path, run_b: Path, side: str, out_dir: Path) -> dict:
    dirs = [run / TENSORS_DIRNAME for run in (run_a, run_b)]
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"{d} not found: run `harness check --save-tensors` first")
    names_a, names_b = ({p.name for p in d.glob("*.npz")} for d in dirs)
    tolerances = _tolerances(run_a)
    summary = RunSummary()
    for name in sorted(names_a | names_b):
        image = name.removesuffix(".npz")
        if name not in names_a or name not in names_b:
            summary.add(ImageResult(image, error=f"only in run {'A' if name in names_a else 'B'}"))
            continue
        try:
            a: ImageTensors = load_image_tensors(dirs[0] / name)
            b: ImageTensors = load_image_tensors(dirs[1] / name)
            summary.add(ImageResult(image, compare_stages(getattr(a, side), getattr(b, side), tolerances)))
        except Exception as exc:  # a damaged or foreign .npz: this image's row, not the end of the run
            summary.add(ImageResult(image, error=f"cannot compare the saved tensors: {one_line(exc)}"))
    report = summary.to_dict()
    for stage in report["stages"]:
        stage["why"] = explain(stage)
    meta = [json.loads((run / "report.json").read_text()) for run in (run_a, run_b)]
    report.update(
        title=f"Run comparison: {run_b} against {run_a} ({side} side)",
        verdict=Verdict.worst(Verdict(s["verdict"]) for s in report["stages"]).value if report["stages"] else None,
        reference={"recipe": f"run A ({run_a}), {side} side", "model": meta[0]["reference"]["model"]},
        deployed={"ensemble": f"run B ({run_b}), {side} side", "taps_model": meta[1]["deployed"]["taps_model"],
                  "pipeline": meta[1]["deployed"]["pipeline"], "url": meta[1]["deployed"]["url"],
                  "protocol": meta[1]["deployed"]["protocol"]},
        spec={"source": meta[0]["spec"]["source"], "tolerances": meta[0]["spec"]["tolerances"]},
        versions=versions(), run={"compared_runs": [str(run_a), str(run_b)], "side": side, "incomplete": False,
                                  "tie_margin": default_tie_margin(tolerances)},
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_reports(out_dir, report)
    return report
