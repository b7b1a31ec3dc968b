"""``harness check`` and ``harness compare``."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.accuracy.shards import ACCURACY_JSON
from harness.arguments import (
    DeploymentArgs,
    Groups,
    OutputArgs,
    ReferenceArgs,
    RepositoryArgs,
    ServerArgs,
    VerdictArgs,
    add_task,
    epilog,
    make_session,
)
from harness.check.budget import BYTES_PER_DECODED_BYTE, DEFAULT_MEMORY_BUDGET
from harness.check.job import DEFAULT_WORKERS, MAX_RETRIES, MAX_WORKERS, CheckOptions, run
from harness.cli.common import IMAGES_HELP, console, out, print_accuracy, print_stage_report, progress_bar, say
from harness.compare_runs import compare_runs
from harness.deployment.side import RETRIES
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.merge import merge, merge_accuracy
from harness.paths import REPORTS_DIR
from harness.report import CHECK_REPORTS, COMPARE_REPORTS, write_reports
from harness.shard import Shard
from harness.stage import DEFAULT_TOP_K
from harness.validation import COUNT, Whole

DEFAULT_REPORT = REPORTS_DIR / "check"
STOPPED = ("the run stopped early (the server, SIGINT/SIGTERM, a full disk: the reports so far are written and the "
           "command that continues it is printed)")
MODEL_NOTE = "an ensemble is replayed step by step, each step output matched to a stage"
CLIENT_NOTE = "run here as your client runs it; its tensors are sent to the model and compared as stages"


def register(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="compare the deployed server with the training-time preprocessing, stage by stage",
        description="Replay the training preprocessing on every image, read every stage from the deployed "
                    "server, compare them in order, and report where they first diverge.",
        epilog=epilog("no stage breaks --fail-on and no image is rejected by one side only", "otherwise",
                      f"usage or setup error, {STOPPED}, or no image could be compared"))
    check.add_argument("images", type=Path, metavar="IMAGES", help=IMAGES_HELP)
    check.add_argument("--top-k", type=COUNT, default=DEFAULT_TOP_K,
                       help="classes compared for the top-k overlap (default: %(default)s)")
    check.add_argument("--save-tensors", action="store_true", help="also write both sides' stage tensors (npz)")
    check.add_argument("--resume", action="store_true", help="continue a stopped run in --report without redoing images")
    check.add_argument("--no-isolate", dest="isolate", action="store_false", help="skip the per-stage isolated runs")
    check.add_argument("--workers", type=Whole(1, MAX_WORKERS), default=DEFAULT_WORKERS,
                       help="images in flight: while some wait for the server, others compute "
                            "(default: twice the cores, at most 8: %(default)s here)")
    check.add_argument("--retries", type=Whole(0, MAX_RETRIES), default=RETRIES,
                       help="retries of a request the server does not answer (default: %(default)s)")
    check.add_argument("--shard", type=shard_arg, metavar="K/N",
                       help="check only shard K (0 to N-1) of N: the images whose name hashes to K; "
                            "`harness merge` joins the N shards' reports into one run's")
    check.add_argument("--memory-budget", type=COUNT, default=DEFAULT_MEMORY_BUDGET // 2 ** 20, metavar="MiB",
                       help="memory the images in flight may hold, estimated from each image's decoded size "
                            f"({BYTES_PER_DECODED_BYTE} bytes per byte of RGB pixels, plus the file); one image "
                            "larger than the budget runs alone (default: %(default)s)")
    check.add_argument("--follow-links", action="store_true",
                       help="also follow symbolic links that lead outside the image folder (default: such a link "
                            "is a skipped row, never read)")
    groups = Groups(check, deployment=DeploymentArgs(notes={"model": MODEL_NOTE, "client": CLIENT_NOTE}),
                    reference=ReferenceArgs(), verdict=VerdictArgs(), server=ServerArgs(),
                    repository=RepositoryArgs(named=True), output=OutputArgs(DEFAULT_REPORT, _reports("check")))
    check.set_defaults(run=lambda args: run_check_command(args, groups))

    compare = commands.add_parser(
        "compare", help="compare the stage tensors saved by two `check --save-tensors` runs",
        description="Compare, image by image and stage by stage, the tensors two `harness check --save-tensors` "
                    "runs saved (one side of each: --side), e.g. the same deployment before and after a change.",
        epilog=epilog("no stage breaks --fail-on", "a stage does", "usage error, or no image is in both runs"))
    compare.add_argument("run_a", type=Path, metavar="RUN_A",
                         help="the --report directory of the first run (the baseline)")
    compare.add_argument("run_b", type=Path, metavar="RUN_B",
                         help="the --report directory of the second run, compared with RUN_A")
    compare.add_argument("--side", choices=("deployed", "reference"), default="deployed",
                         help="which side of each run to compare (default: %(default)s)")
    add_task(compare.add_argument_group("deployment"), "what the runs checked, so what is compared after the model "
                                                       "input (default: what the runs recorded)")
    compare_groups = Groups(compare, verdict=VerdictArgs(ties=False),
                            output=OutputArgs(None, _reports("compare"), help="report directory (default: RUN_B/compare)"))
    compare.set_defaults(run=lambda args: run_compare_command(args, compare_groups))

    merge = commands.add_parser(
        "merge", help="merge the reports of the N shards of one check or accuracy run (--shard K/N) into one run's",
        description="Join the report directories of the N shards of one `harness check --shard K/N` run into "
                    "the report one run over every image would have written (report.json, .md, .html, "
                    "images.jsonl, per_image.csv); shards of `harness accuracy --shard K/N` are pooled into "
                    "one run's accuracy.json and accuracy.md. Refuses a shard missing or given twice, shards of different "
                    "splits, image listings, specs, deployments, options or versions, and unfinished shards.",
        epilog=epilog("as the check's (or accuracy's): no stage breaks its --fail-on and nothing was rejected by one "
                      "side only", "otherwise", "refused, or no image could be compared"))
    merge.add_argument("shards", type=Path, nargs="+", metavar="DIR", help="the shards' --report directories")
    merge_groups = Groups(merge, output=OutputArgs(None, _reports("check"), _reports("accuracy"), required=True,
                                                   help="directory of the merged report"))
    merge.set_defaults(run=lambda args: run_merge_command(args, merge_groups))


def _reports(job: str):
    """The :class:`~harness.report.formats.JobReports` of ``job``, for ``--format``'s help."""
    if job == "accuracy":
        from harness.accuracy.report import ACCURACY_REPORTS

        return ACCURACY_REPORTS

    return CHECK_REPORTS if job == "check" else COMPARE_REPORTS


def shard_arg(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except UsageError as exc:  # argparse's own error: exit status 2, one line
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_check_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    rule, reference = parsed.verdict, parsed.reference
    options = CheckOptions(args.images, parsed.output.report, parsed.deployment, reference.recipe, reference.model,
                           rule.fail_on, rule.tie_margin, rule.allow_rejected, args.top_k, args.save_tensors,
                           args.resume, args.isolate, args.workers, args.retries, args.follow_links,
                           args.memory_budget * 2 ** 20, args.shard, parsed.output.formats)
    session = make_session(parsed.repository, parsed.server, reference.class_names, parsed.deployment.task)
    result = run(session, options, log=say, progress=progress_bar)
    print_stage_report(result.report, result.paths, options.formats,
                       lambda paths: f"report: {paths['markdown']}  (also {paths['html'].name}, {paths['json'].name}, "
                                     "per_image.csv)")
    return result.exit_status()


def run_merge_command(args, groups: Groups) -> int:
    output = groups.parse(args).output
    if (args.shards[0] / ACCURACY_JSON).is_file():  # shards of `harness accuracy --shard`
        accuracy = merge_accuracy(args.shards, output.report, output.formats)
        print_accuracy(accuracy, output.formats, lambda result: say(f"merged {len(args.shards)} accuracy shards: "
                                                                    f"{result.markdown_path}  (also {result.json_path.name})"))
        return accuracy.exit_status()
    result = merge(args.shards, output.report, output.formats)
    print_stage_report(result.report, result.paths, output.formats,
                       lambda paths: f"merged {len(result.shards)} shards: {paths['markdown']}  (also "
                                     f"{paths['html'].name}, {paths['json'].name}, per_image.csv, images.jsonl)")
    return result.exit_status()


def run_compare_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    fail_on, formats = parsed.verdict.fail_on, parsed.output.formats
    report_dir = parsed.output.report or args.run_b / "compare"
    report = compare_runs(args.run_a, args.run_b, args.side, report_dir, args.task, fail_on, write=False)
    paths = write_reports(report_dir, report, formats=formats)
    if formats is None:
        out((report_dir / "report.md").read_text())
        console.print(f"report: {report_dir / 'report.md'}")
    else:
        print_stage_report(report, paths, formats, None)
    if not report.summary.compared:
        raise NothingCompared("no image is in both runs: nothing was compared")
    return EXIT_FOUND if report.fails(fail_on) else EXIT_OK
