"""``harness layers``: one model compared layer by layer between executions (runtimes, precisions)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.arguments import DeploymentArgs, Groups, OutputArgs, RepositoryArgs, ServerArgs, alias, epilog, make_session
from harness.cli.common import console, say
from harness.errors import UsageError
from harness.layers.executions import EXECUTIONS
from harness.layers.job import LayersOptions, RepeatOptions, repeat_reports, run, run_repeat
from harness.layers.job import LayersOptions as L
from harness.layers.job import RepeatOptions as R
from harness.layers.report import LAYERS_REPORTS, pair_line
from harness.validation import COUNT, LARGEST, THREADS, Number


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("layers", help="compare the classifier layer by layer between runtimes and precisions "
                                           "and name the first divergent layer",
                            description="Run the classifier in each execution (the first is the reference) on the same "
                                        "inputs and compare every layer's output; name the first divergent layer.",
                            epilog=epilog("no layer diverged", "one did",
                                          "a model, layer, execution or image directory it cannot use"))
    p.add_argument("images", type=Path, metavar="IMAGES",
                   help="directory of images (the reference preprocessing makes the model inputs) or of saved model "
                        "inputs (check --save-tensors .npz, or .npy)")
    p.add_argument("--onnx", type=Path, default=None,
                   help="the fp32 ONNX (default: the repository's classifier)")
    p.add_argument("--executions", default=",".join(L.executions),
                   help=f"comma-separated, the first is the reference; of {', '.join(EXECUTIONS)} (default: %(default)s)")
    p.add_argument("--fp16-onnx", type=Path, default=None,
                   help="the fp16 ONNX for onnx-fp16/trt-fp16 (default: converted from --onnx as `model export --fp16` does)")
    p.add_argument("--torch-model", default=None, metavar="FILE.py:FACTORY",
                   help="the user's PyTorch classifier for `torch`: a module, or a function returning one "
                        "(default: the default EfficientNet-Lite0)")
    p.add_argument("--torch-prefix", default=None,
                   help="the ONNX scope the module was exported under (default: net for the default model, as "
                        "`harness model export` wraps it; none for --torch-model)")
    p.add_argument("--layers", default=None, help="comma-separated node names to compare (default: every layer)")
    p.add_argument("--rel-rms", type=Number(None, LARGEST, above=0.0), default=L.rel_rms,
                   help="a layer diverges beyond this relative RMS error on an image (default: %(default)s)")
    batch = p.add_argument("--batch-size", type=COUNT, default=L.batch,
                           help="images per forward pass (default: %(default)s)")
    alias(p, "--batch", batch)
    p.add_argument("--limit", type=COUNT, default=None, help="use at most this many images (default: all)")
    layers = Groups(p, repository=RepositoryArgs(), output=OutputArgs(L.report, LAYERS_REPORTS))
    p.set_defaults(run=lambda args: run_layers_command(args, layers))

    r = commands.add_parser("repeat", help="does the deployment answer the same twice? the same images sent alone, "
                                           "in batches and concurrently, every stage compared with the first answer",
                            description="Send the same images alone, in batches and concurrently, and compare every "
                                        "stage of every answer with the image's first, by the drift rule.",
                            epilog=epilog("every answer repeats within the rule", "one does not",
                                          "bad options, no usable image, or the server not reachable or stopped"))
    r.add_argument("images", type=Path, metavar="IMAGES", help="directory of images")
    r.add_argument("--repeats", type=COUNT, default=R.repeats, help="rounds per mode (default: %(default)s)")
    r.add_argument("--batch-sizes", default=",".join(map(str, R.batch_sizes)),
                   help="request sizes the image is sent in with companions (default: %(default)s)")
    r.add_argument("--concurrency", type=THREADS, default=R.concurrency,
                   help="threads sending single-image requests at once (default: %(default)s)")
    r.add_argument("--limit", type=COUNT, default=R.limit, help="use at most this many images (default: %(default)s)")
    deployment = DeploymentArgs(("pipeline", "model", "client", "task"), notes={
        "model": "its scores, and its classifier step alone on the reference input where discovery finds one (see "
                 "harness check --model)", "client": "which makes what the model is fed (see harness check --client)"})
    repeat = Groups(r, deployment=deployment, server=ServerArgs(), repository=RepositoryArgs(),
                    output=OutputArgs(R.report, repeat_reports([], 0, []), help="writes repeat.json and repeat.md here"))
    r.set_defaults(run=lambda args: run_repeat_command(args, repeat))


def run_layers_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    options = LayersOptions(args.images, args.onnx, tuple(e.strip() for e in args.executions.split(",") if e.strip()),
                            args.fp16_onnx, args.torch_model, args.torch_prefix,
                            tuple(n.strip() for n in args.layers.split(",")) if args.layers else None,
                            args.rel_rms, args.batch_size, args.limit, parsed.output.report,
                            "harness layers " + shlex.join(sys.argv[2:]), parsed.output.formats)
    job = run(make_session(parsed.repository), options,
              progress=lambda n: console.print(f"{n} images", end="\r") if sys.stdout.isatty() else None)
    for pair in job.result.pairs:
        console.print(pair_line(pair), highlight=False, soft_wrap=True)
    report = job.paths["html"] if options.formats is None else ", ".join(map(str, job.paths.values()))
    console.print(f"first divergent layer: {job.result.first_divergent_layer or 'none'}; report: {report}",
                  highlight=False, soft_wrap=True)
    return job.exit_status()


def run_repeat_command(args, groups: Groups) -> int:
    parsed = groups.parse(args)
    target = parsed.deployment

    try:
        sizes = tuple(int(b) for b in args.batch_sizes.split(",") if b)
    except ValueError:
        raise UsageError(f"--batch-sizes: integers separated by commas, got {args.batch_sizes!r}") from None
    options = RepeatOptions(args.images, target.pipeline, target.model, args.repeats, sizes, args.concurrency,
                            args.limit, parsed.output.report, target.client, target.task, parsed.output.formats)
    job = run_repeat(make_session(parsed.repository, parsed.server, task=target.task), options, log=say)
    for row in job.rows:
        console.print(f"{row['probe']} {row['stage']}: {row['answers']} answers of {row['images']} images, largest spread "
                      f"{row['max_abs']:.3g}, top-1 changes {row['top1_changes']}: {row['verdict'].value}")
    if job.alone:
        console.print(f"sent one image at a time only (unbatched or no dynamic batching: no batch size tried): "
                      f"{', '.join(job.alone)}")
    report = job.paths["markdown"] if options.formats is None else ", ".join(map(str, job.paths.values()))
    console.print(f"verdict {job.result.verdict.value}; report: {report}")
    return job.exit_status()
