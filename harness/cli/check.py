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
    add_tie_and_rejection_args,
    console,
    deployment_of,
    out,
    progress_bar,
    require_reference_model,
    session_of,
)
from harness.client import PIPELINES
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.paths import REPORTS_DIR
from harness.stage import DEFAULT_TOP_K, Stage

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
    check.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                       help="classes compared for the top-k overlap (default: %(default)s)")
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
    add_tie_and_rejection_args(group)


def run_check_command(args) -> int:
    from harness.check import ImageChecker, run_check
    from harness.corpus import list_images
    from harness.deployment import DeployedSide
    from harness.report import versions, write_reports
    from harness.results import CheckReport, CheckRun, DeployedInfo, ReferenceInfo, ServerInfo, SpecInfo

    session = session_of(args)
    spec = session.spec
    images = list_images(args.images)
    if not images:
        raise UsageError(f"no images in {args.images}")
    if args.resume and not (args.report / "images.jsonl").exists():
        raise UsageError(f"--resume: no earlier run in {args.report}")
    if args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    if args.model:
        require_reference_model(args, [args.model])
    recipe = session.recipe(args.reference)
    reference_model = session.reference_model(args.reference_model, threads=max(1, (os.cpu_count() or 1) // args.workers))
    if Stage.CROP in recipe.stages:  # built-in recipes and Composes: their input size is known now
        reference_model.check_input(spec.reference.preprocess.input_shape)
    tie_margin = session.tie_margin(args.tie_margin)

    with session.connect(log=console.print) as client:
        server_metadata = client.server_metadata()
        deployment = deployment_of(args, session, client, images)
        tolerances = session.tolerances(deployment.scores_kind)
        side = DeployedSide(deployment, session.client_factory(client), args.retries)
        checker = ImageChecker(side, recipe, reference_model, tolerances, args.isolate, args.top_k, tie_margin)
        with progress_bar(len(images), f"checking {deployment.label}") as advance:
            outcome = run_check(images, checker, args.report, args.resume, args.save_tensors, args.workers,
                                on_result=lambda r: advance(r.image))
        server = ServerInfo(session.server_label(client), client.protocol)

    stopped = outcome.stopped
    notes = () if args.model is None or args.model not in {p.ensemble for p in PIPELINES.values()} else (
        f"{args.model} is this repository's own ensemble: --pipeline reads every preprocessing stage from its taps "
        "model, a richer view than its steps give",)
    report = CheckReport(
        summary=outcome.summary.result(), spec=SpecInfo.of(spec, tolerances), versions=versions(server_metadata),
        reference=ReferenceInfo(recipe.describe(), reference_model.name),
        deployed=DeployedInfo.of(deployment, server, notes),
        run=CheckRun(round(outcome.seconds, 2), tie_margin, args.fail_on, args.isolate, args.top_k,
                     args.allow_rejected, str(stopped) if stopped else None))
    summary = report.summary
    missing = len(images) - summary.images
    if stopped is None and missing:  # every image in is an image reported
        raise RuntimeError(f"{missing} images neither compared nor failed")
    paths = write_reports(args.report, report, outcome.visuals)
    out(paths["markdown"].read_text())
    console.print(f"report: {paths['markdown']}  (also {paths['html'].name}, {paths['json'].name}, per_image.csv)")
    if stopped is not None:
        raise stopped.then(f"{summary.compared} images compared so far are kept; "
                           f"continue with: harness check {args.images} --report {args.report} --resume")
    if not summary.compared:
        raise NothingCompared(f"none of the {summary.images} images could be compared "
                              "(every one failed or was rejected): the run says nothing about the deployment")
    return EXIT_FOUND if report.fails(args.fail_on, args.allow_rejected) else EXIT_OK


def run_compare_command(args) -> int:
    from harness.compare_runs import compare_runs

    report_dir = args.report or args.run_b / "compare"
    report = compare_runs(args.run_a, args.run_b, args.side, report_dir)
    out((report_dir / "report.md").read_text())
    console.print(f"report: {report_dir / 'report.md'}")
    if not report.summary.compared:
        raise NothingCompared("no image is in both runs: nothing was compared")
    return EXIT_FOUND if report.fails(args.fail_on) else EXIT_OK
