"""Argument groups and helpers shared by the commands (Polygraphy-style: one group per concern)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from harness.client import PIPELINES, PROTOCOLS, TritonClient
from harness.names import printable, terminal_text
from harness.paths import DEFAULT_REPOSITORY
from harness.report.formats import formats_line
from harness.session import DEFAULT_TIMEOUT, Session
from harness.spec import SPEC_FILENAME

console = Console(stderr=True, highlight=False, markup=False)
"""Progress and messages go to stderr; stdout carries only results. Text is printed as text
(``markup=False``): a path or a name with ``[...]`` in it is never Rich markup; the few
styled lines pass ``markup=True`` with their text escaped (:func:`harness.names.terminal_text`)."""


def say(line: str) -> None:
    """One line of a job's log on the console, as text: names in it never become markup or
    terminal control sequences (:func:`harness.names.terminal_text`)."""
    console.print(terminal_text(line), soft_wrap=True)


def add_repository_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model repository")
    group.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                       help="production model repository (default: %(default)s)")
    group.add_argument("--spec", type=Path, default=None,
                       help=f"preprocessing spec (default: the repository's {SPEC_FILENAME})")


def add_server_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server")
    group.add_argument("--url", default=None,
                       help="host:port of a running Triton server; without it an embedded server "
                            "(cpu profile) is started on free loopback ports and stopped afterwards")
    group.add_argument("--protocol", choices=PROTOCOLS, default="grpc", help="default: %(default)s")
    group.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request (default: %(default)s)")


def add_reference_args(parser: argparse.ArgumentParser, class_names_option: str = "--labels") -> None:
    """The training side; ``class_names_option`` names the class-names file's option (accuracy's
    ``--labels`` labels the images)."""
    group = parser.add_argument_group("reference (training side)")
    group.add_argument("--reference", default=None, metavar="NAME|FILE.py:NAME",
                       help="opencv, torchvision, or your own Compose/callable (default: the spec's [reference] recipe)")
    group.add_argument("--reference-model", default="auto", metavar="auto|torch|onnx|PATH",
                       help="the trained model: your own as an ONNX file (ONNX Runtime) or a TorchScript file "
                            "(PyTorch), needed with --model; or how to run the repository's classifier: auto "
                            "(PyTorch for the default EfficientNet-Lite0, else its ONNX), torch, onnx (default: auto)")
    group.add_argument(class_names_option, dest="class_names", type=Path, default=None, metavar="FILE",
                       help="class names of your model, one per line in output order (default: the repository's)")


def add_deployment_args(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """Which deployed model a command reads: this repository's ``--pipeline``, or ``--model``."""
    group = parser.add_argument_group("deployment")
    if several:
        group.add_argument("--model", action="append", default=None, metavar="NAME",
                           help="a model or ensemble on the server at --url (repeat for several); the harness "
                                "reads its config and finds how to send images and which output holds the scores")
    else:
        group.add_argument("--pipeline", choices=PIPELINES, default="dali",
                           help="this repository's ensemble classify_PIPELINE with its taps model (default: %(default)s)")
        group.add_argument("--model", default=None, metavar="NAME",
                           help="any model or ensemble on the server at --url instead of --pipeline: discovered from "
                                "its config, an ensemble replayed step by step, each step output matched to a stage")
        group.add_argument("--stage", action="append", default=None, metavar="STEP=STAGE",
                           help="with --model: compare step model STEP's output (or STEP.TENSOR) as STAGE (decode, "
                                "resize, crop, input, output, or none), overriding the mapping found; repeatable")
    group.add_argument("--client", default=None, metavar="FILE.py:NAME",
                       help="with --model: your client's own preprocessing, a function of the file's bytes returning "
                            "the model's input tensor (or a dict of tensors by input name); it runs here as your "
                            "client runs it, its tensors are sent to the model and compared as stages")
    group.add_argument("--output", default=None, metavar="NAME",
                       help="with --model: the output the task reads (default for classification: the one FP32 "
                            "[classes] output, logits preferred; for embedding: the one named like an embedding; "
                            "for detection: the raw output beside the boxes, or the one float output)")
    group.add_argument("--postprocess", default=None, metavar="FILE.py:NAME",
                       help="--task detection: your postprocessing of the detector's raw output, a callable of "
                            "(outputs by name, geometry) returning harness.detection.boxes.Detections, run on both "
                            "sides (default: the spec's [postprocess] table)")
    add_task_arg(group)


def add_task_arg(group) -> None:
    """``--task``: what is compared after the model input (:mod:`harness.task`)."""
    from harness.task import TASKS

    group.add_argument("--task", choices=TASKS, default=None,
                       help="what the model is for, so what is compared after its input (default: classification "
                            "for --pipeline; --task embedding reads embed_PIPELINE, --task detection detect_PIPELINE "
                            "with the repository's detection.toml; for --model, what its outputs show: a label file "
                            "or logits for classification, a name like embedding for embedding, boxes for detection)")


def add_tie_and_rejection_args(group) -> None:
    """``--tie-margin`` and ``--allow-rejected``: what check, diagnose and accuracy let pass."""
    group.add_argument("--tie-margin", type=float, default=None, metavar="MARGIN",
                       help="a top-1 change is a tie, not a divergence, when the reference's top-1 score was ahead "
                            "of the deployed top-1 by at most this much, in the units of the scores compared: logits, "
                            "or probability for a deployment answering probabilities (default: the output "
                            "tolerance's atol, 0.5 logits or 0.05 probability unless the spec's "
                            "[tolerances.output] sets it); for --task embedding, a nearest-neighbour change whose "
                            "reference similarities differ by at most this (default 0.01)")
    group.add_argument("--allow-rejected", action="store_true",
                       help="an image rejected by one side only (the server cannot serve an image training "
                            "processes, or the reverse) does not fail the run (default: it does)")


def add_images_args(parser: argparse.ArgumentParser, default_report: Path) -> None:
    """The images to run on, the deployed side, and where the report goes."""
    parser.add_argument("images", type=Path,
                        help="directory of images: every regular file in it is an input, and a symbolic link to one "
                             "inside it; every other entry (hidden, a directory, a FIFO, a link leading outside) is "
                             "listed as skipped, with why")
    add_deployment_args(parser)
    parser.add_argument("--report", type=Path, default=default_report, help="report directory (default: %(default)s)")


def target_of(args: argparse.Namespace, model: str | None = None):
    """The :class:`~harness.deployment.target.Target` the deployment arguments name (``model``
    overrides ``--model``, for commands that take several)."""
    from harness.deployment.mapping import parse_overrides
    from harness.deployment.target import Target
    from harness.errors import UsageError

    if model is None and isinstance(getattr(args, "model", None), str):
        model = args.model
    try:
        stages = parse_overrides(getattr(args, "stage", None))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Target(getattr(args, "pipeline", "dali"), model, getattr(args, "output", None), stages,
                  getattr(args, "task", None), getattr(args, "client", None), getattr(args, "postprocess", None))


@contextlib.contextmanager
def progress_bar(total: int, description: str):
    """A rich progress bar on stderr; yields ``advance(status="")``."""
    # The status is an image's name: shown as text, never as Rich markup.
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}", markup=False), TimeRemainingColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task(terminal_text(description), total=total, status="")
        yield lambda status="": bar.update(task, advance=1, status=printable(status))


def session_of(args: argparse.Namespace) -> Session:
    """The :class:`~harness.session.Session` the repository, spec and server arguments describe."""
    return Session(args.repository, args.spec, getattr(args, "url", None), getattr(args, "protocol", "grpc"),
                   getattr(args, "timeout", DEFAULT_TIMEOUT), getattr(args, "class_names", None),
                   getattr(args, "task", None))


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[TritonClient]:
    """A client to ``--url``, or to an embedded server started for this command."""
    with session_of(args).connect(log=say) as client:
        yield client


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def print_stage_report(report, paths: dict, formats, today) -> None:
    """report.md on stdout (rendered when --format left it out), and on stderr which files were
    written: ``today(paths)`` as always without --format, else every file."""
    from harness.report import render_markdown

    out(paths["markdown"].read_text() if "markdown" in paths else render_markdown(report))
    say(today(paths) if formats is None else formats_line(paths.values()))


def print_accuracy(result, formats, today) -> None:
    """accuracy.md on stdout (rendered when --format left it out), and on stderr which files
    were written: ``today(result)`` prints it as always without --format, else every file is named."""
    from harness.accuracy.report import render_effect_markdown, render_markdown
    from harness.results import EffectReport

    if result.markdown_path is not None:
        out(result.markdown_path.read_text())
    else:
        out((render_effect_markdown if isinstance(result.report, EffectReport) else render_markdown)(result.report))
    if formats is None:
        today(result)
    else:
        say(formats_line(result.files.values()))
