"""``harness layers``: one model compared layer by layer between executions (runtimes, precisions)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.cli.common import add_repository_args, console, session_of
from harness.errors import EXIT_FOUND, EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    from harness.layers.compare import LayerTolerance
    from harness.layers.executions import EXECUTIONS
    from harness.layers.run import DEFAULT_BATCH

    p = commands.add_parser("layers", help="compare the classifier layer by layer between runtimes and precisions "
                                           "and name the first divergent layer")
    p.add_argument("images", type=Path, help="directory of images (the reference preprocessing makes the model "
                                             "inputs) or of saved model inputs (.npy)")
    p.add_argument("--onnx", type=Path, default=None,
                   help="the fp32 ONNX (default: the repository's classifier)")
    p.add_argument("--executions", default="torch,onnx",
                   help=f"comma-separated, the first is the reference; of {', '.join(EXECUTIONS)} (default torch,onnx)")
    p.add_argument("--fp16-onnx", type=Path, default=None,
                   help="the fp16 ONNX for onnx-fp16/trt-fp16 (default: converted from --onnx as `model export --fp16` does)")
    p.add_argument("--layers", default=None, help="comma-separated node names to compare (default: every layer)")
    p.add_argument("--rel-rms", type=float, default=LayerTolerance.rel_rms,
                   help=f"a layer diverges beyond this relative RMS error on an image (default {LayerTolerance.rel_rms})")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"images per forward pass (default {DEFAULT_BATCH})")
    p.add_argument("--limit", type=int, default=None, help="use at most this many images (default all)")
    p.add_argument("--report", type=Path, default=Path("build/layers"), help="report directory (default build/layers)")
    add_repository_args(p)
    p.set_defaults(run=run_layers_command)


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
                        progress=lambda n: console.print(f"{n} images", end="\r") if sys.stdout.isatty() else None)
    paths = write_layers_report(args.report, result, "harness layers " + shlex.join(sys.argv[2:]))
    for pair in result.pairs:
        console.print(pair_line(pair), highlight=False, soft_wrap=True)
    console.print(f"first divergent layer: {result.first_divergent_layer or 'none'}; report: {paths['html']}",
                  highlight=False, soft_wrap=True)
    return EXIT_FOUND if result.first_divergent_layer else EXIT_OK
