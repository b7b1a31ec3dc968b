"""``harness layers``: one model compared layer by layer between executions (runtimes, precisions)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.cli.common import add_repository_args, add_server_args, connect, console, session_of
from harness.errors import EXIT_FOUND, EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    from harness.layers.compare import LayerTolerance
    from harness.layers.executions import EXECUTIONS
    from harness.layers.run import DEFAULT_BATCH

    p = commands.add_parser("layers", help="compare the classifier layer by layer between runtimes and precisions "
                                           "and name the first divergent layer")
    p.add_argument("images", type=Path, help="directory of images (the reference preprocessing makes the model "
                                             "inputs) or of saved model inputs (check --save-tensors .npz, or .npy)")
    p.add_argument("--onnx", type=Path, default=None,
                   help="the fp32 ONNX (default: the repository's classifier)")
    p.add_argument("--executions", default="torch,onnx",
                   help=f"comma-separated, the first is the reference; of {', '.join(EXECUTIONS)} (default torch,onnx)")
    p.add_argument("--fp16-onnx", type=Path, default=None,
                   help="the fp16 ONNX for onnx-fp16/trt-fp16 (default: converted from --onnx as `model export --fp16` does)")
    p.add_argument("--torch-model", default=None, metavar="FILE.py:FACTORY",
                   help="the user's PyTorch classifier for `torch`: a module, or a function returning one "
                        "(default: the default EfficientNet-Lite0)")
    p.add_argument("--torch-prefix", default=None,
                   help="the ONNX scope the module was exported under (default: net for the default model, as "
                        "`harness model export` wraps it; none for --torch-model)")
    p.add_argument("--layers", default=None, help="comma-separated node names to compare (default: every layer)")
    p.add_argument("--rel-rms", type=float, default=LayerTolerance.rel_rms,
                   help=f"a layer diverges beyond this relative RMS error on an image (default {LayerTolerance.rel_rms})")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"images per forward pass (default {DEFAULT_BATCH})")
    p.add_argument("--limit", type=int, default=None, help="use at most this many images (default all)")
    p.add_argument("--report", type=Path, default=Path("build/layers"), help="report directory (default build/layers)")
    add_repository_args(p)
    p.set_defaults(run=run_layers_command)

    from harness.layers.repeatability import DEFAULT_BATCH_SIZES, DEFAULT_CONCURRENCY, DEFAULT_REPEATS

    r = commands.add_parser("repeat", help="does the deployment answer the same twice? the same images sent alone, "
                                           "in batches and concurrently, every stage compared with the first answer")
    r.add_argument("images", type=Path, help="directory of images")
    r.add_argument("--pipeline", default="dali", help="which ensemble and taps model (default dali)")
    r.add_argument("--model", default=None, metavar="NAME",
                   help="any model or ensemble on the server instead of --pipeline: its scores, and its classifier "
                        "step alone on the reference input where discovery finds one (see harness check --model)")
    r.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help=f"rounds per mode (default {DEFAULT_REPEATS})")
    r.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)),
                   help="request sizes the image is sent in with companions (default %(default)s)")
    r.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help=f"threads sending single-image requests at once (default {DEFAULT_CONCURRENCY})")
    r.add_argument("--limit", type=int, default=8, help="images used (default 8)")
    r.add_argument("--report", type=Path, default=Path("build/repeat"), help="writes repeat.json and repeat.md here")
    add_repository_args(r)
    add_server_args(r)
    r.set_defaults(run=run_repeat_command)


def run_layers_command(args) -> int:
    from harness.errors import UsageError
    from harness.layers.compare import LayerTolerance
    from harness.layers.report import pair_line, write_layers_report
    from harness.layers.run import run_layers

    session = session_of(args)
    if args.batch < 1 or args.rel_rms <= 0:
        raise UsageError("--batch must be at least 1 and --rel-rms above 0")
    onnx_path = args.onnx or session.onnx_path
    executions = [e.strip() for e in args.executions.split(",") if e.strip()]
    layers = [n.strip() for n in args.layers.split(",")] if args.layers else None
    result = run_layers(args.images, onnx_path, executions, session.recipe(), LayerTolerance(args.rel_rms), layers,
                        args.fp16_onnx, args.batch, args.limit,
                        progress=lambda n: console.print(f"{n} images", end="\r") if sys.stdout.isatty() else None,
                        torch_model=args.torch_model, torch_prefix=args.torch_prefix)
    paths = write_layers_report(args.report, result, "harness layers " + shlex.join(sys.argv[2:]))
    for pair in result.pairs:
        console.print(pair_line(pair), highlight=False, soft_wrap=True)
    console.print(f"first divergent layer: {result.first_divergent_layer or 'none'}; report: {paths['html']}",
                  highlight=False, soft_wrap=True)
    return EXIT_FOUND if result.first_divergent_layer else EXIT_OK


def run_repeat_command(args) -> int:
    import json

    from harness.compare.tolerance import tolerances_for
    from harness.corpus import list_images
    from harness.deployment.target import Target, open_deployment
    from harness.errors import UsageError
    from harness.layers.repeatability import check_repeatability, deployment_probes, repository_probes, summary_rows
    from harness.stage import Stage

    session = session_of(args)
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    except ValueError:
        raise UsageError(f"--batch-sizes: integers separated by commas, got {args.batch_sizes!r}") from None
    if args.repeats < 1 or args.concurrency < 1 or any(b < 2 for b in sizes):
        raise UsageError("--repeats and --concurrency must be at least 1, every batch size at least 2")
    recipe = session.recipe()
    images = []
    for path in list_images(args.images):
        data = path.read_bytes()
        try:
            recipe(data)
        except ValueError as exc:  # ImageError and friends: skipped, said
            console.print(f"skipped {path.name}: {exc}")
            continue
        images.append((path.name, data))
        if len(images) == args.limit:
            break
    if not images:
        raise UsageError(f"{args.images}: no usable image")
    drift = tolerances_for(session.spec.preprocess, drift=True)
    with connect(args) as client:
        if args.model:
            found = open_deployment(session, client, Target(model=args.model), list_images(args.images), console.print)
            probes = deployment_probes(found, recipe)
        else:
            probes = repository_probes(args.pipeline, recipe)
        result = check_repeatability(session.client_factory(client), probes, images,
                                     lambda stage: drift[Stage.OUTPUT if stage == "classifier" else Stage(stage)],
                                     args.repeats, sizes, args.concurrency)
    args.report.mkdir(parents=True, exist_ok=True)
    (args.report / "repeat.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    lines = [f"# Repeatability: {len(images)} images, {result.repeats} rounds, batch sizes {sizes}, "
             f"{result.concurrency} concurrent", "", "| model | stage | images | answers | max abs spread | top-1 changes "
             "| verdict |", "|---|---|---|---|---|---|---|"]
    for row in summary_rows(result):
        lines.append(f"| {row['probe']} | {row['stage']} | {row['images']} | "
                     f"{row['answers']} | {row['max_abs']:.3g} | {row['top1_changes']} | {row['verdict'].value} |")
        console.print(f"{row['probe']} {row['stage']}: {row['answers']} answers of {row['images']} images, largest spread "
                      f"{row['max_abs']:.3g}, top-1 changes {row['top1_changes']}: {row['verdict'].value}")
    (args.report / "repeat.md").write_text("\n".join(lines) + "\n")
    console.print(f"verdict {result.verdict.value}; report: {args.report / 'repeat.md'}")
    return EXIT_FOUND if result.verdict.value == "diverged" else EXIT_OK
