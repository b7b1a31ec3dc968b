"""``harness check`` and ``harness compare``."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.check.budget import BYTES_PER_DECODED_BYTE, DEFAULT_MEMORY_BUDGET
from harness.check.job import DEFAULT_WORKERS, FAIL_ON
from harness.cli.common import (
    add_images_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    add_task_arg,
    add_tie_and_rejection_args,
    console,
    out,
    print_accuracy,
    print_stage_report,
    progress_bar,
    say,
    session_of,
    target_of,
)
from harness.deployment.side import RETRIES
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.paths import REPORTS_DIR
from harness.report.formats import add_format_arg
from harness.shard import Shard
from harness.stage import DEFAULT_TOP_K

DEFAULT_REPORT = REPORTS_DIR / "check"


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="compare the deployed server with the training-time preprocessing, stage by stage",
        description="Replay the training preprocessing on every image, read every stage from the deployed "
                    "server, compare them in order, and report where they first diverge. Exit status: 0 no "
                    "stage breaks --fail-on and no image is rejected by one side only, 1 otherwise, 2 usage/setup "
                    "error, the run stopped early (the server, SIGINT/SIGTERM, a full disk: the reports so far are "
                    "written and the command that continues it is printed), or no image could be compared.")
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
    check.add_argument("--retries", type=int, default=RETRIES,
                       help="retries of a request the server does not answer (default: %(default)s)")
    check.add_argument("--shard", type=shard_arg, metavar="K/N",
                       help="check only shard K (0 to N-1) of N: the images whose name hashes to K; "
                            "`harness merge` joins the N shards' reports into one run's")
    check.add_argument("--memory-budget", type=int, default=DEFAULT_MEMORY_BUDGET // 2 ** 20, metavar="MiB",
                       help="memory the images in flight may hold, estimated from each image's decoded size "
                            f"({BYTES_PER_DECODED_BYTE} bytes per byte of RGB pixels, plus the file); one image "
                            "larger than the budget runs alone (default: %(default)s)")
    check.add_argument("--follow-links", action="store_true",
                       help="also follow symbolic links that lead outside the image folder (default: such a link "
                            "is a skipped row, never read)")
    add_server_args(check)
    add_repository_args(check)
    add_format_arg(check, _reports("check"))
    check.set_defaults(run=run_check_command)

    merge = commands.add_parser(
        "merge", help="merge the reports of the N shards of one check or accuracy run (--shard K/N) into one run's",
        description="Join the report directories of the N shards of one `harness check --shard K/N` run into "
                    "the report one run over every image would have written (report.json, .md, .html, "
                    "images.jsonl, per_image.csv); shards of `harness accuracy --shard K/N` are pooled into "
                    "one run's accuracy.json and accuracy.md. Refuses a shard missing or given twice, shards of different "
                    "splits, image listings, specs, deployments, options or versions, and unfinished shards. "
                    "Exit status: as the check's: 0 no stage breaks its --fail-on and nothing was rejected by "
                    "one side only, 1 otherwise, 2 refused or no image could be compared.")
    merge.add_argument("shards", type=Path, nargs="+", metavar="DIR", help="the shards' --report directories")
    merge.add_argument("--report", type=Path, required=True, help="directory of the merged report")
    add_format_arg(merge, _reports("check"), _reports("accuracy"))
    merge.set_defaults(run=run_merge_command)

    compare = commands.add_parser("compare", help="compare the stage tensors saved by two `check --save-tensors` runs")
    compare.add_argument("run_a", type=Path)
    compare.add_argument("run_b", type=Path)
    compare.add_argument("--side", choices=("deployed", "reference"), default="deployed",
                         help="which side of each run to compare (default: %(default)s)")
    compare.add_argument("--report", type=Path, default=None, help="default: <run_b>/compare")
    compare.add_argument("--fail-on", choices=FAIL_ON, default="diverged", help=FAIL_ON_HELP)
    add_task_arg(compare)
    add_format_arg(compare, _reports("compare"))
    compare.set_defaults(run=run_compare_command)


def _reports(job: str):
    """The :class:`~harness.report.formats.JobReports` of ``job``, for ``--format``'s help."""
    if job == "accuracy":
        from harness.accuracy.report import ACCURACY_REPORTS

        return ACCURACY_REPORTS
    from harness.report import CHECK_REPORTS, COMPARE_REPORTS

    return CHECK_REPORTS if job == "check" else COMPARE_REPORTS


def shard_arg(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except UsageError as exc:  # argparse's own error: exit status 2, one line
        raise argparse.ArgumentTypeError(str(exc)) from None


FAIL_ON_HELP = ("exit 1 if any stage's verdict is this or worse: diverged; tie (also a top-1 change within the "
                "tie margin); close (any difference beyond equal) (default: %(default)s)")


def add_verdict_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("verdicts")
    group.add_argument("--fail-on", choices=FAIL_ON, default="diverged", help=FAIL_ON_HELP)
    add_tie_and_rejection_args(group)


def run_check_command(args) -> int:
    from harness.check.job import CheckOptions, run

    options = CheckOptions(args.images, args.report, target_of(args), args.reference, args.reference_model,
                           args.fail_on, args.tie_margin, args.allow_rejected, args.top_k, args.save_tensors,
                           args.resume, args.isolate, args.workers, args.retries, args.follow_links,
                           args.memory_budget * 2 ** 20, args.shard, args.formats)
    result = run(session_of(args), options, log=say, progress=progress_bar)
    print_stage_report(result.report, result.paths, args.formats,
                       lambda paths: f"report: {paths['markdown']}  (also {paths['html'].name}, {paths['json'].name}, "
                                     "per_image.csv)")
    return result.exit_status()


def run_merge_command(args) -> int:
    from harness.accuracy.shards import ACCURACY_JSON
    from harness.merge import merge, merge_accuracy

    if (args.shards[0] / ACCURACY_JSON).is_file():  # shards of `harness accuracy --shard`
        accuracy = merge_accuracy(args.shards, args.report, args.formats)
        print_accuracy(accuracy, args.formats, lambda result: say(f"merged {len(args.shards)} accuracy shards: "
                                                                  f"{result.markdown_path}  (also {result.json_path.name})"))
        return accuracy.exit_status()
    result = merge(args.shards, args.report, args.formats)
    print_stage_report(result.report, result.paths, args.formats,
                       lambda paths: f"merged {len(result.shards)} shards: {paths['markdown']}  (also "
                                     f"{paths['html'].name}, {paths['json'].name}, per_image.csv, images.jsonl)")
    return result.exit_status()


def run_compare_command(args) -> int:
    from harness.compare_runs import compare_runs
    from harness.report import write_reports

    report_dir = args.report or args.run_b / "compare"
    report = compare_runs(args.run_a, args.run_b, args.side, report_dir, args.task, args.fail_on, write=False)
    paths = write_reports(report_dir, report, formats=args.formats)
    if args.formats is None:
        out((report_dir / "report.md").read_text())
        console.print(f"report: {report_dir / 'report.md'}")
    else:
        print_stage_report(report, paths, args.formats, None)
    if not report.summary.compared:
        raise NothingCompared("no image is in both runs: nothing was compared")
    return EXIT_FOUND if report.fails(args.fail_on) else EXIT_OK
