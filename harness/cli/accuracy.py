"""``harness accuracy``: top-1/top-k, recall/precision, flip rate and McNemar, reference vs deployed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.cli.common import (
    add_deployment_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    add_tie_and_rejection_args,
    console,
    out,
    progress_bar,
    session_of,
    target_of,
)
from harness.client import PIPELINES
from harness.errors import NothingCompared, UsageError
from harness.paths import REPORTS_DIR
from harness.stage import DEFAULT_TOP_K

DEFAULT_REPORT = REPORTS_DIR / "accuracy"


def register(commands: argparse._SubParsersAction) -> None:
    accuracy = commands.add_parser(
        "accuracy", help="accuracy of the reference and each deployed ensemble on a labeled image set",
        description="Classify every image of DATASET with the training reference (in-process) and with each deployed "
                    "ensemble (through the server); report top-1/top-k accuracy, per-class recall and precision "
                    "(macro averages), the top-1 flip rate of each deployed path against the reference, and "
                    "McNemar's exact test. DATASET is an ImageFolder directory (one sub-directory per class, named "
                    "by a class name from the model's labels.txt or a class index), a CSV of file,label rows (paths "
                    "relative to the CSV), or a directory of unlabeled images (flip rates only). Images that fail on "
                    "any path are listed with their reasons and excluded from every path; one that only the "
                    "deployment or only training rejects fails the run (see --allow-rejected), one that fails on "
                    "both sides does not. A top-1 change within the tie margin is a tie: listed and counted, it "
                    "fails the run only with --fail-on tie. Exit status: 0 no deployed path changes a top-1 class "
                    "beyond a tie and nothing is rejected by one side only, 1 otherwise, 2 usage/setup error, no "
                    "image classifiable, or the server stopped answering.")
    accuracy.add_argument("dataset", type=Path, metavar="DATASET", help="ImageFolder directory, CSV file, or image directory")
    accuracy.add_argument("--labels", type=Path, default=None, metavar="CSV",
                          help="label the images of the DATASET directory with this CSV of file,label rows "
                               "(file paths relative to the CSV; every image of DATASET needs a row)")
    add_reference_args(accuracy, class_names_option="--class-names")
    accuracy.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=None,
                          help="this repository's deployed paths to score (default: both, unless --model is given)")
    add_deployment_args(accuracy, several=True)
    accuracy.add_argument("--batch-size", type=int, default=8,
                          help="images per server request and per reference-model call (default: %(default)s)")
    accuracy.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                          help="top-k accuracy: the label among the k best classes (default: %(default)s)")
    accuracy.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="report directory (default: %(default)s)")
    group = accuracy.add_argument_group("verdicts")
    group.add_argument("--fail-on", choices=("diverged", "tie"), default="diverged",
                       help="exit 1 on a top-1 change beyond the tie margin (diverged), or on any top-1 change, "
                            "ties included (tie) (default: %(default)s)")
    add_tie_and_rejection_args(group)
    add_server_args(accuracy)
    add_repository_args(accuracy)
    accuracy.set_defaults(run=run_accuracy_command)


def run_accuracy_command(args) -> int:
    from harness.accuracy import (
        AccuracyReport,
        AccuracyRun,
        evaluate,
        load_dataset,
        predict_deployed,
        predict_reference,
        write_report,
    )
    from harness.deployment import DeployedSide
    from harness.deployment.target import open_deployment, require_reference_model
    from harness.report import versions
    from harness.results import ReferenceInfo, ServerInfo

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    models = [target_of(args, model) for model in dict.fromkeys(args.model or ())]
    pipelines = list(dict.fromkeys(args.pipelines if args.pipelines is not None else () if models else PIPELINES))
    require_reference_model(models, args.reference_model)
    session = session_of(args)
    classes = session.classes()
    dataset = load_dataset(args.dataset, classes, args.labels)  # a DatasetError exits 2 (harness.errors)
    tie_margin = session.tie_margin(args.tie_margin)
    recipe = session.recipe(args.reference)
    reference_model = session.reference_model(args.reference_model)

    start = time.perf_counter()
    samples = dataset.samples
    with session.connect(log=console.print) as client:
        server = ServerInfo(session.server_label(client), args.protocol)
        server_metadata = client.server_metadata()
        images = [s.path for s in samples]
        sides = [DeployedSide(deployment, session.client_factory(client)) for deployment in
                 [session.deployment(client, pipeline) for pipeline in pipelines]
                 + [open_deployment(session, client, model, images, console.print) for model in models]]
        with progress_bar(len(samples) * (1 + len(sides)), "classifying") as advance:
            predictions = [predict_reference(samples, recipe, reference_model, args.batch_size,
                                             on_image=lambda name: advance(f"reference {name}"), k=args.top_k)]
            for side in sides:
                label = side.deployment.label
                predictions.append(predict_deployed(samples, side, args.batch_size,
                                                    on_image=lambda name, p=label: advance(f"{p} {name}"), k=args.top_k))

    report = AccuracyReport(
        evaluate(dataset, predictions, classes, tie_margin, args.top_k), classes,
        ReferenceInfo(recipe.describe(), reference_model.name, recipe.name),
        server, session.spec.source,
        AccuracyRun(round(time.perf_counter() - start, 2), args.batch_size, args.fail_on, args.allow_rejected),
        versions(server_metadata))
    json_path, markdown_path = write_report(args.report, report)
    out(markdown_path.read_text())
    console.print(f"report: {markdown_path}  (also {json_path.name})")
    failed = report.result.failed
    if failed:
        console.print(f"[yellow]{len(failed)} of {len(samples)} images failed and were excluded from every "
                      f"path[/] (reasons in {markdown_path.name})")
    if not report.result.evaluated:
        raise NothingCompared(f"none of the {len(samples)} images of {args.dataset} could be classified on every path")
    if report.any_rejected() and not args.allow_rejected:
        return 1
    return 1 if report.any_flips(ties=args.fail_on == "tie") else 0
