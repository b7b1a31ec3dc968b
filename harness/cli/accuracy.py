"""``harness accuracy``: top-1/top-k, recall/precision, flip rate and McNemar, reference vs deployed."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.accuracy.job import AccuracyOptions, run
from harness.accuracy.report import ACCURACY_REPORTS
from harness.arguments import (
    DeploymentArgs,
    Groups,
    OutputArgs,
    ReferenceArgs,
    RepositoryArgs,
    ServerArgs,
    VerdictArgs,
    alias,
    epilog,
    make_session,
)
from harness.cli.check import shard_arg
from harness.cli.common import console, print_accuracy, progress_bar, say
from harness.client import PIPELINES
from harness.names import terminal_text
from harness.paths import REPORTS_DIR
from harness.stage import DEFAULT_TOP_K
from harness.validation import COUNT

DEFAULT_REPORT = REPORTS_DIR / "accuracy"
CLOSE_NOTE = ("accuracy compares predictions, not tensors: close fails on what tie fails on, any top-1 (or "
              "nearest-neighbour, or box) change")


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
                    "fails the run only with --fail-on tie. With --task embedding the effect is "
                    "retrieval by label instead (leave one out: recall@1 and @5, top-5 neighbour overlap, nearest-"
                    "neighbour changes with ties, McNemar on the recall@1 hits; any labels, see docs/tasks.md). With "
                    "--task detection DATASET is a COCO detection JSON (images beside it, or in the directory given "
                    "with the JSON as --labels): precision, recall and F1 at IoU 0.5 (ICDAR), COCO mAP (pycocotools), "
                    "McNemar on the images every box of which is found, and the images whose boxes changed against "
                    "the reference (docs/detection.md). With --task segmentation DATASET is a folder of images and --labels "
                    "a folder of masks, PNGs of the same stems (0/255, or class indices): per path mean IoU, Dice, "
                    "boundary F and matte error against them, Wilcoxon on the per-image IoU against the reference "
                    "(docs/segmentation.md).",
        epilog=epilog("no deployed path changes a top-1 class beyond a tie and nothing is rejected by one side only",
                      "otherwise", "usage/setup error, no image classifiable, or the server stopped answering"))
    accuracy.add_argument("dataset", type=Path, metavar="DATASET",
                          help="ImageFolder directory, CSV file, image directory, or COCO JSON (--task detection)")
    accuracy.add_argument("--labels", type=Path, default=None, metavar="CSV|JSON|DIR",
                          help="label the images of the DATASET directory with this CSV of file,label rows "
                               "(file paths relative to the CSV; every image of DATASET needs a row), a COCO "
                               "detection JSON naming them, or a folder of masks (PNGs of the images' stems: "
                               "--task segmentation)")
    accuracy.add_argument("--batch-size", type=COUNT, default=8,
                          help="images per server request and per reference-model call (default: %(default)s)")
    accuracy.add_argument("--top-k", type=COUNT, default=DEFAULT_TOP_K,
                          help="top-k accuracy: the label among the k best classes (default: %(default)s)")
    accuracy.add_argument("--shard", type=shard_arg, metavar="K/N",
                          help="classify only shard K (0 to N-1) of N: the images whose name hashes to K; "
                               "`harness merge` pools the N shards into one run's report")

    deployment = DeploymentArgs(("pipeline", "model", "client", "output", "postprocess", "task"), several=True,
                                notes={"pipeline": "(default: both, unless --model is given)"})
    groups = Groups(accuracy, reference=ReferenceArgs(alias_labels=False), deployment=deployment,
                    verdict=VerdictArgs(note=CLOSE_NOTE), server=ServerArgs(), repository=RepositoryArgs(named=True),
                    output=OutputArgs(DEFAULT_REPORT, ACCURACY_REPORTS))
    pipeline = next(a for a in accuracy._actions if "--pipeline" in a.option_strings)
    alias(accuracy, "--pipelines", pipeline, use="--pipeline NAME (repeated)", nargs="+", choices=tuple(PIPELINES),
          each=True)
    accuracy.set_defaults(run=lambda args: run_accuracy_command(args, groups))


def run_accuracy_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    deployed, reference, rule, output = parsed.deployment, parsed.reference, parsed.verdict, parsed.output
    options = AccuracyOptions(args.dataset, output.report, args.labels, deployed.pipelines, deployed.targets,
                              reference.recipe, reference.model, args.batch_size, args.top_k, rule.fail_on,
                              rule.tie_margin, rule.allow_rejected, args.shard, deployed.task, output.formats,
                              deployed.postprocess)
    session = make_session(parsed.repository, parsed.server, reference.class_names, deployed.task)
    result = run(session, options, log=say, progress=progress_bar)
    print_accuracy(result, output.formats,
                   lambda r: console.print(f"report: {r.markdown_path}  (also {r.json_path.name})"))
    failed, images = result.left_out()
    if failed:
        console.print(f"[yellow]{failed} of {images} images failed and were excluded from every "
                      f"path[/] (reasons in {terminal_text((result.markdown_path or result.json_path).name)})",
                      markup=True)
    return result.exit_status()
