"""``harness check`` and ``harness compare``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.cli.common import (
    add_images_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    connect,
    console,
    out,
    progress_bar,
    spec_path,
)
from harness.client import PIPELINES, TritonClient
from harness.compare.tolerance import Verdict
from harness.errors import UsageError
from harness.paths import REPORTS_DIR

DEFAULT_REPORT = REPORTS_DIR / "check"
DEFAULT_WORKERS = min(8, 2 * (os.cpu_count() or 1))


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="compare the deployed server with the training-time preprocessing, stage by stage",
        description="Replay the training preprocessing on every image, read every stage from the deployed "
                    "server, compare them in order, and report where they first diverge. Exit status: 0 no "
                    "stage breaks --fail-on and no image is rejected by one side only, 1 otherwise, 2 usage/setup "
                    "error, the server stopped, or no image could be compared.")
    add_images_args(check, DEFAULT_REPORT)
    add_reference_args(check)
    add_verdict_args(check)
    check.add_argument("--top-k", type=int, default=5, help="classes compared for the top-k overlap (default: %(default)s)")
    check.add_argument("--save-tensors", action="store_true", help="also write both sides' stage tensors (npz)")
    check.add_argument("--resume", action="store_true", help="continue a stopped run in --report without redoing images")
    check.add_argument("--no-isolate", dest="isolate", action="store_false", help="skip the per-stage isolated runs")
    check.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                       help="images in flight: while some wait for the server, others compute "
                            "(default: twice the cores, at most 8: %(default)s here)")
    check.add_argument("--retries", type=int, default=3, help="retries of a request the server does not answer")
    add_server_args(check)
    add_repository_args(check)
    check.set_defaults(run=run_check_command)

    compare = commands.add_parser("compare", help="compare the stage tensors saved by two `check --save-tensors` runs")
    compare.add_argument("run_a", type=Path)
    compare.add_argument("run_b", type=Path)
    compare.add_argument("--side", choices=("deployed", "reference"), default="deployed",
                         help="which side of each run to compare (default: %(default)s)")
    compare.add_argument("--report", type=Path, default=None, help="default: <run_b>/compare")
    compare.add_argument("--fail-on", choices=FAIL_ON, default="diverged", help=FAIL_ON_HELP)
    compare.set_defaults(run=run_compare_command)


FAIL_ON = ("diverged", "tie", "close")
FAIL_ON_HELP = ("exit 1 if any stage's verdict is this or worse: diverged; tie (also a top-1 change within the "
                "tie margin); close (any difference beyond equal) (default: %(default)s)")


def add_verdict_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("verdicts")
    group.add_argument("--fail-on", choices=FAIL_ON, default="diverged", help=FAIL_ON_HELP)
    group.add_argument("--tie-margin", type=float, default=None, metavar="LOGITS",
                       help="a top-1 change is a tie, not a divergence, when the reference's top-1 logit was ahead "
                            "of the deployed top-1 by at most this much (default: the output tolerance's atol, "
                            "0.5 unless the spec's [tolerances.output] sets it)")
    group.add_argument("--allow-rejected", action="store_true",
                       help="an image rejected by one side only (the server cannot serve an image training "
                            "processes, or the reverse) does not fail the run (default: it does)")


def exit_status(report: dict, fail_on: str, allow_rejected: bool = False) -> int:
    """1 if a stage's verdict reaches ``fail_on``, or (unless ``allow_rejected``) one side
    alone rejected an image; else 0. A run that compared nothing is the caller's 2."""
    threshold = Verdict(fail_on).rank
    if any(Verdict(s["verdict"]).rank >= threshold for s in report["stages"]):
        return 1
    rejected = any(report.get("rejected", {}).values())
    return 1 if rejected and not allow_rejected else 0


def run_check_command(args) -> int:
    from harness.check import ImageChecker, run_check
    from harness.compare.ties import default_tie_margin
    from harness.compare.tolerance import tolerances_for
    from harness.corpus import list_images
    from harness.model import ONNX_FILENAME
    from harness.reference import load_recipe
    from harness.reference.model import load_reference_model
    from harness.report import build_report, versions, write_reports
    from harness.spec import load_spec

    spec = load_spec(spec_path(args))
    images = list_images(args.images)
    if not images:
        raise UsageError(f"no images in {args.images}")
    if args.resume and not (args.report / "images.jsonl").exists():
        raise UsageError(f"--resume: no earlier run in {args.report}")
    recipe = load_recipe(spec, args.reference)
    reference_model = load_reference_model(args.repository / "classifier" / ONNX_FILENAME, args.reference_model,
                                           threads=max(1, (os.cpu_count() or 1) // args.workers))
    if "crop" in recipe.stages:  # built-in recipes and Composes: their input size is known now
        reference_model.check_input(spec.reference.preprocess.input_shape)
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    tie_margin = default_tie_margin(tolerances) if args.tie_margin is None else args.tie_margin
    if tie_margin < 0 or args.top_k < 1:
        raise UsageError("--tie-margin must be at least 0 and --top-k at least 1")

    with connect(args) as client:
        url, protocol = client.url, client.protocol
        server_metadata = client.server_metadata()
        checker = ImageChecker(lambda: TritonClient(url, protocol, args.timeout), args.pipeline, recipe,
                               reference_model, spec.preprocess, tolerances, args.isolate, args.retries,
                               args.top_k, tie_margin)
        with progress_bar(len(images), f"checking {args.pipeline}") as advance:
            outcome = run_check(images, checker, args.report, args.resume, args.save_tensors, args.workers,
                                on_result=lambda r: advance(r.image))

    stopped = outcome.stopped
    report = build_report(
        outcome.summary.to_dict(), spec=spec, tolerances=tolerances,
        reference={"recipe": recipe.describe(), "model": reference_model.name},
        deployed={"ensemble": PIPELINES[args.pipeline].ensemble, "taps_model": PIPELINES[args.pipeline].taps_model,
                  "pipeline": args.pipeline, "url": url if args.url else f"embedded server ({url})",
                  "protocol": protocol},
        run={"seconds": round(outcome.seconds, 2), "incomplete": stopped is not None,
             "stopped_reason": str(stopped) if stopped else None, "fail_on": args.fail_on, "isolated": args.isolate,
             "tie_margin": tie_margin, "top_k": args.top_k, "allow_rejected": args.allow_rejected},
        versions=versions(server_metadata),
    )
    missing = len(images) - report["images"]
    if stopped is None and missing:  # every image in is an image reported
        raise RuntimeError(f"{missing} images neither compared nor failed")
    paths = write_reports(args.report, report, outcome.visuals)
    out((args.report / "report.md").read_text())
    console.print(f"report: {paths['markdown']}  (also {paths['html'].name}, {paths['json'].name}, per_image.csv)")
    if stopped is not None:
        console.print(f"[bold red]error:[/] {stopped}. {report['compared']} images compared so far are kept; "
                      f"continue with: harness check {args.images} --report {args.report} --resume")
        return 2
    if not report["compared"]:
        console.print(f"[bold red]error:[/] none of the {report['images']} images could be compared "
                      "(every one failed or was rejected): the run says nothing about the deployment")
        return 2
    return exit_status(report, args.fail_on, args.allow_rejected)


def run_compare_command(args) -> int:
    from harness.compare_runs import compare_runs

    report_dir = args.report or args.run_b / "compare"
    report = compare_runs(args.run_a, args.run_b, args.side, report_dir)
    out((report_dir / "report.md").read_text())
    console.print(f"report: {report_dir / 'report.md'}")
    if not report["compared"]:
        console.print("[bold red]error:[/] no image is in both runs: nothing was compared")
        return 2
    return exit_status(report, args.fail_on)
