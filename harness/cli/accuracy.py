"""``harness accuracy``: top-1/top-5, recall/precision, flip rate and McNemar, reference vs deployed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.cli.common import (
    add_reference_args,
    add_repository_args,
    add_server_args,
    connect,
    console,
    out,
    progress_bar,
    spec_path,
)
from harness.client import PIPELINES
from harness.errors import UsageError
from harness.paths import REPORTS_DIR

DEFAULT_REPORT = REPORTS_DIR / "accuracy"


def register(commands: argparse._SubParsersAction) -> None:
    accuracy = commands.add_parser(
        "accuracy", help="accuracy of the reference and each deployed ensemble on a labeled image set",
        description="Classify every image of DATASET with the training reference (in-process) and with each deployed "
                    "ensemble (through the server); report top-1/top-5 accuracy, per-class recall and precision "
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
    add_reference_args(accuracy)
    accuracy.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES),
                          help="deployed paths to score (default: %(default)s)")
    accuracy.add_argument("--batch-size", type=int, default=8,
                          help="images per server request and per reference-model call (default: %(default)s)")
    accuracy.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="report directory (default: %(default)s)")
    group = accuracy.add_argument_group("verdicts")
    group.add_argument("--fail-on", choices=("diverged", "tie"), default="diverged",
                       help="exit 1 on a top-1 change beyond the tie margin (diverged), or on any top-1 change, "
                            "ties included (tie) (default: %(default)s)")
    group.add_argument("--tie-margin", type=float, default=None, metavar="LOGITS",
                       help="a top-1 change is a tie when the reference's top-1 logit was ahead of the deployed "
                            "top-1 by at most this much (default: the output tolerance's atol, 0.5 unless the "
                            "spec's [tolerances.output] sets it)")
    group.add_argument("--allow-rejected", action="store_true",
                       help="an image rejected by one side only does not fail the run (default: it does)")
    add_server_args(accuracy)
    add_repository_args(accuracy)
    accuracy.set_defaults(run=run_accuracy_command)


def run_accuracy_command(args) -> int:
    from harness.accuracy import (
        DatasetError,
        any_flips,
        any_rejected,
        evaluate,
        load_dataset,
        predict_deployed,
        predict_reference,
        report_dict,
        write_report,
    )
    from harness.client import ServerUnavailable
    from harness.compare.ties import default_tie_margin
    from harness.compare.tolerance import tolerances_for
    from harness.model import LABELS_FILENAME, ONNX_FILENAME, read_labels
    from harness.reference import load_recipe
    from harness.reference.model import load_reference_model
    from harness.report import versions
    from harness.spec import load_spec

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    pipelines = list(dict.fromkeys(args.pipelines))
    classes = read_labels(args.repository / "classifier" / LABELS_FILENAME)
    try:
        dataset = load_dataset(args.dataset, classes, args.labels)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    spec = load_spec(spec_path(args))
    tie_margin = default_tie_margin(tolerances_for(spec.preprocess, spec.tolerances)) if args.tie_margin is None \
        else args.tie_margin
    if tie_margin < 0:
        raise UsageError(f"--tie-margin must be at least 0, got {tie_margin}")
    recipe = load_recipe(spec, args.reference)
    reference_model = load_reference_model(args.repository / "classifier" / ONNX_FILENAME, args.reference_model)

    start = time.perf_counter()
    samples = dataset.samples
    with connect(args) as client:
        url = client.url
        server_metadata = client.server_metadata()
        with progress_bar(len(samples) * (1 + len(pipelines)), "classifying") as advance:
            predictions = [predict_reference(samples, recipe, reference_model, args.batch_size,
                                             on_image=lambda name: advance(f"reference {name}"))]
            for pipeline in pipelines:
                try:
                    predictions.append(predict_deployed(samples, client, pipeline, args.batch_size,
                                                        on_image=lambda name, p=pipeline: advance(f"{p} {name}")))
                except ServerUnavailable as exc:
                    raise UsageError(f"the Triton server stopped answering: {exc}") from None

    result = evaluate(dataset, predictions, classes, tie_margin)
    report = report_dict(result, classes, {
        "reference": {"recipe": recipe.describe(), "recipe_name": recipe.name, "model": reference_model.name},
        "deployed": {"pipelines": pipelines, "url": url if args.url else f"embedded server ({url})",
                     "protocol": args.protocol},
        "spec": spec.source,
        "run": {"seconds": round(time.perf_counter() - start, 2), "batch_size": args.batch_size,
                "fail_on": args.fail_on, "allow_rejected": args.allow_rejected},
        "versions": versions(server_metadata),
    })
    json_path, markdown_path = write_report(args.report, report)
    out(markdown_path.read_text())
    console.print(f"report: {markdown_path}  (also {json_path.name})")
    if result.failed:
        console.print(f"[yellow]{len(result.failed)} of {len(samples)} images failed and were excluded from every "
                      f"path[/] (reasons in {markdown_path.name})")
    if not result.evaluated:
        raise UsageError(f"none of the {len(samples)} images of {args.dataset} could be classified on every path")
    if any_rejected(report) and not args.allow_rejected:
        return 1
    return 1 if any_flips(report, ties=args.fail_on == "tie") else 0

