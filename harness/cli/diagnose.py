"""``harness diagnose``: which known culprits explain a divergence, what each costs, and what to change."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from harness.arguments import (
    DeploymentArgs,
    Groups,
    OutputArgs,
    ReferenceArgs,
    RepositoryArgs,
    ServerArgs,
    VerdictArgs,
    epilog,
    make_session,
)
from harness.cli.check import CLIENT_NOTE, MODEL_NOTE
from harness.cli.common import IMAGES_HELP, console, out, progress_bar, say
from harness.diagnose.job import DiagnoseOptions, run
from harness.paths import REPORTS_DIR
from harness.report.diagnosis import DEPLOYMENT_SPEC, DIAGNOSIS_REPORTS, TRAINING_SPEC
from harness.report.formats import formats_line

DEFAULT_REPORT = REPORTS_DIR / "diagnose"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "diagnose", help="find which known culprits explain a divergence, and the changes that fix it",
        description="Check the images as `harness check` does, then try each known culprit as a change to the "
                    "reference recipe, against the deployed tensors that check read from the server once, in rounds: "
                    "each round re-locates the first divergent stage with the changes found so far applied. Ranks "
                    "the causes by what each costs in predictions and recommends every change in spec terms. "
                    "Near-tie top-1 changes are not divergences. With "
                    "--reference FILE.py:NAME (your training code), it first finds the spec that reproduces it on the "
                    "same images, diagnoses against that spec, and compares the callable itself.",
        epilog=epilog("check's verdict on the same images: nothing diverged",
                      "check's verdict: a divergence, explained or not, or an image only one side can process "
                      "(with a training callable: the callable diverges from the deployment)",
                      "usage/setup errors, the server stopped, or no image could be compared"))
    p.add_argument("images", type=Path, metavar="IMAGES", help=IMAGES_HELP)
    p.add_argument("--write-spec", type=Path, default=None, metavar="FILE",
                   help="write the deployment spec: the training reference as the deployment behaves (every cause "
                        "applied to [reference]) to FILE; `harness check --spec FILE` then passes. Nothing is "
                        "written without a cause found, and the run says so")
    p.add_argument("--write-training-spec", type=Path, default=None, metavar="FILE",
                   help="with training code (--reference FILE.py:NAME, torchvision:, timm:, hf:): write your training "
                        "as it is (the spec that reproduces it) to FILE; nothing without a spec reproducing it. "
                        "With --write-spec, both in one run")
    groups = Groups(p, deployment=DeploymentArgs(notes={"model": MODEL_NOTE, "client": CLIENT_NOTE}),
                    reference=ReferenceArgs(), verdict=VerdictArgs(fail_on=False), server=ServerArgs(),
                    repository=RepositoryArgs(named=True), output=OutputArgs(DEFAULT_REPORT, DIAGNOSIS_REPORTS))
    p.set_defaults(run=lambda args: run_diagnose_command(args, groups))


def run_diagnose_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    reference, rule, output = parsed.reference, parsed.verdict, parsed.output
    options = DiagnoseOptions(args.images, output.report, parsed.deployment, reference.recipe, reference.model,
                              args.write_spec, args.write_training_spec, rule.tie_margin, rule.allow_rejected,
                              output.formats)

    @contextlib.contextmanager
    def status(text):
        with console.status(text) as shown:
            yield shown.update

    session = make_session(parsed.repository, parsed.server, reference.class_names, parsed.deployment.task)
    result = run(session, options, log=say, progress=progress_bar, status=status)
    paths = result.paths
    if "markdown" in paths:
        out(paths["markdown"].read_text())
    else:
        from harness.report.diagnosis import render_markdown

        out(render_markdown(result.report))

    specs = "".join(f"; {what.split(' (')[0].lower()}: {path}" for what, path in (
        (DEPLOYMENT_SPEC, result.written_spec), (TRAINING_SPEC, result.written_training_spec)) if path)
    if output.formats is None:
        console.print(f"diagnosis: {paths['markdown']} (also {paths['json'].name})" + specs)
    else:
        say(formats_line(paths.values()) + specs)
    for what, path in ((DEPLOYMENT_SPEC, result.written_spec), (TRAINING_SPEC, result.written_training_spec)):
        if path:
            console.print(f"{what}: {path}")
    for why in (result.report.not_written, result.report.training_not_written):
        if why:
            console.print(why)
    return result.exit_status()
