"""``harness check`` and ``harness compare``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.cli.common import (
    PROJECT_ROOT,
    UsageError,
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

DEFAULT_REPORT = PROJECT_ROOT / "reports" / "check"
DEFAULT_WORKERS = min(8, 2 * (os.cpu_count() or 1))


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="compare the deployed server with the training-time preprocessing, stage by stage",
        description="Replay the training preprocessing on every image, read every stage from the deployed "
                    "server, compare them in order, and report where they first diverge. Exit status: 0 no "
                    "stage breaks --fail-on, 1 one does, 2 usage/setup error or the server stopped.")
    add_images_args(check, DEFAULT_REPORT)
    add_reference_args(check)
    check.add_argument("--fail-on", choices=("diverged", "close"), default="diverged",
                       help="exit 1 if any stage's verdict is this or worse (default: %(default)s)")
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
    compare.add_argument("--fail-on", choices=("diverged", "close"), default="diverged")
    compare.set_defaults(run=run_compare_command)


def exit_status(report: dict, fail_on: str) -> int:
    threshold = Verdict(fail_on).rank
    return 1 if any(Verdict(s["verdict"]).rank >= threshold for s in report["stages"]) else 0


def run_check_command(args) -> int:
    from harness.check import ImageChecker, run_check
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

    with connect(args) as client:
        url, protocol = client.url, client.protocol
        server_metadata = client.server_metadata()
        checker = ImageChecker(lambda: TritonClient(url, protocol, args.timeout), args.pipeline, recipe,
                               reference_model, spec.preprocess, tolerances, args.isolate, args.retries)
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
             "stopped_reason": str(stopped) if stopped else None, "fail_on": args.fail_on, "isolated": args.isolate},
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
    return exit_status(report, args.fail_on)


def run_compare_command(args) -> int:
    from harness.compare_runs import compare_runs

    report_dir = args.report or args.run_b / "compare"
    report = compare_runs(args.run_a, args.run_b, args.side, report_dir)
    out((report_dir / "report.md").read_text())
    console.print(f"report: {report_dir / 'report.md'}")
    return exit_status(report, args.fail_on)
