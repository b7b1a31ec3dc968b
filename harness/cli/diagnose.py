"""``harness diagnose``: which known culprits explain a divergence, what each costs, and what to change."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from harness.cli.common import (
    add_images_args,
    add_reference_args,
    add_repository_args,
    add_server_args,
    add_tie_and_rejection_args,
    console,
    out,
    progress_bar,
    say,
    session_of,
    target_of,
)
from harness.paths import REPORTS_DIR
from harness.report.diagnosis import DIAGNOSIS_REPORTS
from harness.report.formats import add_format_arg, formats_line

DEFAULT_REPORT = REPORTS_DIR / "diagnose"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "diagnose", help="find which known culprits explain a divergence, and the changes that fix it",
        description="Try each known culprit as a change to the reference recipe, against deployed tensors read "
                    "from the server once, in rounds: each round re-locates the first divergent stage with the "
                    "changes found so far applied. Ranks the causes by what each costs in predictions and "
                    "recommends every change in spec terms. Near-tie top-1 changes are not divergences. Exit "
                    "status: 0 nothing diverged, or the causes found explain every divergence; 1 a divergence "
                    "nothing explains, or an image only one side can process; 2 usage/setup errors, the server "
                    "stopped, or no image could be compared. With --reference FILE.py:NAME (your training code), it "
                    "first finds the spec that reproduces it on the same images, diagnoses against that spec, and "
                    "compares the callable itself; no spec reproducing it, a callable that diverges from the "
                    "deployment exits 1.")
    add_images_args(p, DEFAULT_REPORT)
    add_reference_args(p)
    p.add_argument("--write-spec", type=Path, default=None, metavar="FILE",
                   help="write the corrected reference spec (every cause applied to [reference]) to FILE; "
                        "`harness check --spec FILE` then compares against it. With a training callable "
                        "(--reference FILE.py:NAME): its fingerprint, your training as a spec. Nothing is written "
                        "without a cause found (or without a spec reproducing the callable), and the run says so")
    add_tie_and_rejection_args(p.add_argument_group("verdicts"))
    add_server_args(p)
    add_repository_args(p)
    add_format_arg(p, DIAGNOSIS_REPORTS)
    p.set_defaults(run=run_diagnose_command)


def run_diagnose_command(args) -> int:
    from harness.diagnose.job import DiagnoseOptions, run

    options = DiagnoseOptions(args.images, args.report, target_of(args), args.reference, args.reference_model,
                              args.write_spec, args.tie_margin, args.allow_rejected, args.formats)

    @contextlib.contextmanager
    def status(text):
        with console.status(text) as shown:
            yield shown.update

    result = run(session_of(args), options, log=say, progress=progress_bar, status=status)
    paths = result.paths
    if "markdown" in paths:
        out(paths["markdown"].read_text())
    else:
        from harness.report.diagnosis import render_markdown

        out(render_markdown(result.report))
    spec = f"; corrected spec: {result.written_spec}" if result.written_spec else ""
    if args.formats is None:
        console.print(f"diagnosis: {paths['markdown']} (also {paths['json'].name})" + spec)
    else:
        say(formats_line(paths.values()) + spec)
    if result.report.not_written:
        console.print(result.report.not_written)
    return result.exit_status()
