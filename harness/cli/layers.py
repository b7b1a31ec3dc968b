"""``harness layers``: one model compared layer by layer between executions (runtimes, precisions)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.cli.common import add_repository_args, add_server_args, add_task_arg, console, say, session_of
from harness.errors import UsageError
from harness.report.formats import add_format_arg


def register(commands: argparse._SubParsersAction) -> None:
    from harness.layers.executions import EXECUTIONS
    from harness.layers.job import LayersOptions as L
    from harness.layers.job import RepeatOptions as R
    from harness.layers.job import repeat_reports
    from harness.layers.report import LAYERS_REPORTS

    p = commands.add_parser("layers", help="compare the classifier layer by layer between runtimes and precisions "
                                           "and name the first divergent layer",
                            description="Run the classifier in each execution (the first is the reference) on the same "
                                        "inputs and compare every layer's output; name the first divergent layer. Exit "
                                        "status: 0 no layer diverged, 1 one did, 2 a model, layer, execution or image "
                                        "directory it cannot use.")
    p.add_argument("images", type=Path, help="directory of images (the reference preprocessing makes the model "
                                             "inputs) or of saved model inputs (check --save-tensors .npz, or .npy)")
    p.add_argument("--onnx", type=Path, default=None,
                   help="the fp32 ONNX (default: the repository's classifier)")
    p.add_argument("--executions", default=",".join(L.executions),
                   help=f"comma-separated, the first is the reference; of {', '.join(EXECUTIONS)} (default %(default)s)")
    p.add_argument("--fp16-onnx", type=Path, default=None,
                   help="the fp16 ONNX for onnx-fp16/trt-fp16 (default: converted from --onnx as `model export --fp16` does)")
    p.add_argument("--torch-model", default=None, metavar="FILE.py:FACTORY",
                   help="the user's PyTorch classifier for `torch`: a module, or a function returning one "
                        "(default: the default EfficientNet-Lite0)")
    p.add_argument("--torch-prefix", default=None,
                   help="the ONNX scope the module was exported under (default: net for the default model, as "
                        "`harness model export` wraps it; none for --torch-model)")
    p.add_argument("--layers", default=None, help="comma-separated node names to compare (default: every layer)")
    p.add_argument("--rel-rms", type=float, default=L.rel_rms,
                   help="a layer diverges beyond this relative RMS error on an image (default %(default)s)")
    p.add_argument("--batch", type=int, default=L.batch, help="images per forward pass (default %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="use at most this many images (default all)")
    p.add_argument("--report", type=Path, default=L.report, help="report directory (default %(default)s)")
    add_repository_args(p)
    add_format_arg(p, LAYERS_REPORTS)
    p.set_defaults(run=run_layers_command)

    r = commands.add_parser("repeat", help="does the deployment answer the same twice? the same images sent alone, "
                                           "in batches and concurrently, every stage compared with the first answer",
                            description="Send the same images alone, in batches and concurrently, and compare every "
                                        "stage of every answer with the image's first, by the drift rule. Exit status: "
                                        "0 every answer repeats within the rule, 1 one does not, 2 bad options, no "
                                        "usable image, or the server not reachable or stopped.")
    r.add_argument("images", type=Path, help="directory of images")
    r.add_argument("--pipeline", default=R.pipeline, help="which ensemble and taps model (default %(default)s)")
    r.add_argument("--model", default=None, metavar="NAME",
                   help="any model or ensemble on the server instead of --pipeline: its scores, and its classifier "
                        "step alone on the reference input where discovery finds one (see harness check --model)")
    r.add_argument("--client", default=None, metavar="FILE.py:NAME",
                   help="with --model: your client's preprocessing makes what the model is fed (see harness check --client)")
    r.add_argument("--repeats", type=int, default=R.repeats, help="rounds per mode (default %(default)s)")
    r.add_argument("--batch-sizes", default=",".join(map(str, R.batch_sizes)),
                   help="request sizes the image is sent in with companions (default %(default)s)")
    r.add_argument("--concurrency", type=int, default=R.concurrency,
                   help="threads sending single-image requests at once (default %(default)s)")
    r.add_argument("--limit", type=int, default=R.limit, help="images used (default %(default)s)")
    r.add_argument("--report", type=Path, default=R.report, help="writes repeat.json and repeat.md here")
    add_task_arg(r)
    add_repository_args(r)
    add_server_args(r)
    add_format_arg(r, repeat_reports([], 0, []))
    r.set_defaults(run=run_repeat_command)


def run_layers_command(args) -> int:
    from harness.layers.job import LayersOptions, run
    from harness.layers.report import pair_line

    options = LayersOptions(args.images, args.onnx, tuple(e.strip() for e in args.executions.split(",") if e.strip()),
                            args.fp16_onnx, args.torch_model, args.torch_prefix,
                            tuple(n.strip() for n in args.layers.split(",")) if args.layers else None,
                            args.rel_rms, args.batch, args.limit, args.report,
                            "harness layers " + shlex.join(sys.argv[2:]), args.formats)
    job = run(session_of(args), options,
              progress=lambda n: console.print(f"{n} images", end="\r") if sys.stdout.isatty() else None)
    for pair in job.result.pairs:
        console.print(pair_line(pair), highlight=False, soft_wrap=True)
    report = job.paths["html"] if args.formats is None else ", ".join(map(str, job.paths.values()))
    console.print(f"first divergent layer: {job.result.first_divergent_layer or 'none'}; report: {report}",
                  highlight=False, soft_wrap=True)
    return job.exit_status()


def run_repeat_command(args) -> int:
    from harness.layers.job import RepeatOptions, run_repeat

    try:
        sizes = tuple(int(b) for b in args.batch_sizes.split(",") if b)
    except ValueError:
        raise UsageError(f"--batch-sizes: integers separated by commas, got {args.batch_sizes!r}") from None
    options = RepeatOptions(args.images, args.pipeline, args.model, args.repeats, sizes, args.concurrency, args.limit,
                            args.report, args.client, args.task, args.formats)
    job = run_repeat(session_of(args), options, log=say)
    for row in job.rows:
        console.print(f"{row['probe']} {row['stage']}: {row['answers']} answers of {row['images']} images, largest spread "
                      f"{row['max_abs']:.3g}, top-1 changes {row['top1_changes']}: {row['verdict'].value}")
    if job.alone:
        console.print(f"sent one image at a time only (unbatched or no dynamic batching: no batch size tried): "
                      f"{', '.join(job.alone)}")
    report = job.paths["markdown"] if args.formats is None else ", ".join(map(str, job.paths.values()))
    console.print(f"verdict {job.result.verdict.value}; report: {report}")
    return job.exit_status()
