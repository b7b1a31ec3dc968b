"""``harness compare RUN_A RUN_B``: compare the stage tensors two ``check --save-tensors`` runs
saved, offline. For example the GPU deployment's run against the cpu profile's, or today's
server against last release's. Run A plays the reference, run B the deployed side."""

from __future__ import annotations

import json
from pathlib import Path

from harness.check import TENSORS_DIRNAME, ImageTensors, load_image_tensors
from harness.check.files import saved_image_name
from harness.compare.aggregate import RunSummary
from harness.compare.stages import compare_stages
from harness.errors import UsageError
from harness.report import versions, write_reports
from harness.result import ImageResult, one_line
from harness.results import RunComparison, SpecInfo
from harness.scores import score_kind
from harness.stage import Stage
from harness.task import get_task
from harness.tolerance import Tolerance


def _tolerances(saved: dict) -> dict[Stage, Tolerance]:
    return {Stage(stage): Tolerance(**values) for stage, values in saved["spec"]["tolerances"].items()}


def _saved(directory: Path) -> dict[str, Path]:
    """Image name -> its tensors file (a file that cannot be opened goes by its file name:
    its row then says why it cannot be compared)."""
    out = {}
    for path in sorted(directory.glob("*.npz")):
        try:
            out[saved_image_name(path)] = path
        except Exception:  # a damaged or foreign .npz: this image's failed row, below
            out[path.name.removesuffix(".npz")] = path
    return out


def compare_runs(run_a: Path, run_b: Path, side: str, out_dir: Path, task: str | None = None,
                 fail_on: str = "diverged", write: bool = True) -> RunComparison:
    """Every image both runs saved, compared stage by stage with run A's tolerances and by
    its task (``task``: ``--task``, which must be the runs'; None: run A's); an image only
    one run has, or whose tensors cannot be read, is a failed row. Writes the reports to
    ``out_dir`` (unless not ``write``: the caller writes the formats it chose,
    :func:`harness.report.write_reports`); ``fail_on``: the verdict its cases fail at. Raises
    FileNotFoundError when a run saved no tensors, UsageError when the runs checked different tasks."""
    dirs = [run / TENSORS_DIRNAME for run in (run_a, run_b)]
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"{d} not found: run `harness check --save-tensors` first")
    meta = [json.loads((run / "report.json").read_text()) for run in (run_a, run_b)]
    files_a, files_b = (_saved(d) for d in dirs)
    tolerances = _tolerances(meta[0])
    tasks = [m.get("task") or get_task(None).name for m in meta]  # reports before issue 26: the default task
    if len(set(tasks + ([task] if task else []))) > 1:
        raise UsageError(f"run A checked {tasks[0]}, run B {tasks[1]}" + (f", --task says {task}" if task else "")
                         + ": compare runs of one task")
    chosen = get_task(tasks[0])
    scores = score_kind(meta[0].get("run", {}).get("scores_kind", "logits"))  # older reports: logits
    # A margin that follows the output tolerance is derived again (classification's, as always); another, run A's.
    margin = (chosen.default_margin(tolerances, scores) if chosen.margin_follows_tolerance
              else meta[0]["run"]["tie_margin"])
    summary = RunSummary(events=chosen.events(margin))
    for image in sorted(files_a.keys() | files_b.keys()):
        if image not in files_a or image not in files_b:
            summary.add(ImageResult(image, error=f"only in run {'A' if image in files_a else 'B'}"))
            continue
        try:
            a: ImageTensors = load_image_tensors(files_a[image])
            b: ImageTensors = load_image_tensors(files_b[image])
            ref, dep = getattr(a, side), getattr(b, side)
            stages = compare_stages(ref, dep, tolerances, tie_margin=margin, scores=scores, result=chosen.result_of)
            both = Stage.OUTPUT in ref and Stage.OUTPUT in dep
            data = chosen.image_data(ref[Stage.OUTPUT], dep[Stage.OUTPUT]) if both else None
            summary.add(ImageResult(image, stages, task_data=data))
        except Exception as exc:  # a damaged or foreign .npz: this image's row, not the end of the run
            summary.add(ImageResult(image, error=f"cannot compare the saved tensors: {one_line(exc)}"))
    report = RunComparison(
        summary=summary.result(), spec=SpecInfo(meta[0]["spec"]["source"], tolerances), versions=versions(),
        run_a=str(run_a), run_b=str(run_b), side=side, model=meta[0]["reference"]["model"],
        deployed_b=meta[1]["deployed"], run_tie_margin=margin, compared_fail_on=fail_on)
    if write:
        write_reports(out_dir, report)
    return report
