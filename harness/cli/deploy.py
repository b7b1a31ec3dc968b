"""``harness deploy``: the user's model and training definition -> a verified Triton deployment."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.arguments import add_class_names, add_task, epilog
from harness.cli.common import out, progress_bar, say
from harness.deploy.job import DeployOptions, run
from harness.deploy.summary import summary_lines
from harness.paths import DEFAULT_PHOTOS, REPORTS_DIR

DEFAULT_REPORT = REPORTS_DIR / "deploy"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "deploy", help="write the DALI + TensorRT Triton deployment of your model and training preprocessing, and check it",
        description="Read the training preprocessing (--reference: torchvision:WEIGHTS, timm:PATH or timm:MODEL, "
                    "hf:PATH[:pil|:torchvision], or FILE.py:NAME, a Compose or preset) into the spec's operations, "
                    "and write into OUT a Triton model repository serving MODEL (an ONNX classifier) with it: an "
                    "image validation step, the DALI preprocessing (GPU decode), the TensorRT model (its engine "
                    "built by docker compose in OUT), the ensemble with dynamic batching, and the taps model the "
                    "harness reads. The production profile is validated (configs through Triton's schema, the "
                    "DALI pipelines' arguments against the pinned DALI, the engine build command), then its cpu "
                    "profile is served here and checked on IMAGES against the same --reference: per stage, what "
                    "DALI does not replay exactly and what it costs in predictions. `harness serve --repository "
                    "OUT` serves it; `harness check --repository OUT --reference ...` checks it again.",
        epilog=epilog("written, and its check passed (or was not asked for)",
                      "written, and its check found a divergence or a changed top-1 class",
                      "usage or setup error: nothing deployable (what the training does that no spec operation "
                      "holds is named), or the check could compare nothing"))
    p.add_argument("model", type=Path, metavar="MODEL", help="your trained classifier, an ONNX file (NCHW or NHWC input)")
    p.add_argument("--reference", required=True, metavar="SOURCE",
                   help="your training preprocessing: torchvision:WEIGHTS, timm:PATH|MODEL, hf:PATH[:pil|:torchvision], "
                        "FILE.py:NAME")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the model repository to write (a new or empty folder, or one harness wrote: then replaced when whole)")
    p.add_argument("--images", type=Path, default=DEFAULT_PHOTOS if DEFAULT_PHOTOS.is_dir() else None, metavar="DIR",
                   help="photos to check the deployment on (default: %(default)s)")
    p.add_argument("--no-check", action="store_true", help="write and validate only: serve and check nothing")
    add_task(p, note="what the model is for: deploy writes classification deployments (default: classification)",
             default="classification")
    p.add_argument("--name", default=None,
                   help="your deployment's name: its models' (NAME, NAME_model, NAME_preprocess_dali, ...), so that "
                        "several deployments share OUT and one Triton, and the compose project's (default: this "
                        "project's model names, the compose project OUT's folder name)")
    p.add_argument("--triton-release", default=None, metavar="YY.MM",
                   help="the Triton release it is for (default: deploy/versions.toml's; another is refused unless the "
                        "manifest knows its DALI and TensorRT versions)")
    p.add_argument("--report", type=Path, default=DEFAULT_REPORT, metavar="DIR",
                   help="the check's report directory (default: %(default)s)")
    add_class_names(p.add_argument_group("class names"), alias_labels=False,
                    help="your model's class names, one a line in output order (default: the class indices)")
    p.set_defaults(run=run_deploy_command)


def run_deploy_command(args) -> int:
    options = DeployOptions(args.model, args.reference, args.out, None if args.no_check else args.images, args.report,
                            args.task, args.class_names, triton_release=args.triton_release, name=args.name)
    result = run(options, log=say, progress=progress_bar)
    out(render(result))
    return result.exit_status()


def render(result) -> str:
    """What deploy prints: what was read and how exactly, what was written, and per stage what is left."""
    return "\n".join(summary_lines(result))


__all__ = ["register"]
