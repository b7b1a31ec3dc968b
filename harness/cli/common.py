"""Argument groups and helpers shared by the commands (Polygraphy-style: one group per concern)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from harness.client import PIPELINES, PROTOCOLS, TritonClient
from harness.spec import SPEC_FILENAME

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
DEFAULT_PHOTOS = PROJECT_ROOT / "data" / "photos"
BUILD_DIR = PROJECT_ROOT / "build"

console = Console(stderr=True, highlight=False)
"""Progress and messages go to stderr; stdout carries only results."""


class UsageError(Exception):
    """Bad arguments or setup: the command exits with status 2 and this message."""


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
    group.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: %(default)s)")


def add_reference_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("reference (training side)")
    group.add_argument("--reference", default=None, metavar="NAME|FILE.py:NAME",
                       help="opencv, torchvision, or your own Compose/callable (default: the spec's [reference] recipe)")
    group.add_argument("--reference-model", choices=("auto", "torch", "onnx"), default="auto",
                       help="auto: PyTorch for the default EfficientNet-Lite0, else the ONNX in ONNX Runtime")


def add_images_args(parser: argparse.ArgumentParser, default_report: Path) -> None:
    """The images to run on, the deployed path, and where the report goes."""
    parser.add_argument("images", type=Path, help="directory of images (every file in it is an input)")
    parser.add_argument("--pipeline", choices=PIPELINES, default="dali", help="deployed path (default: %(default)s)")
    parser.add_argument("--report", type=Path, default=default_report, help="report directory (default: %(default)s)")


@contextlib.contextmanager
def progress_bar(total: int, description: str):
    """A rich progress bar on stderr; yields ``advance(status="")``."""
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=total, status="")
        yield lambda status="": bar.update(task, advance=1, status=status)


def spec_path(args: argparse.Namespace) -> Path:
    return args.spec or args.repository / SPEC_FILENAME


@contextlib.contextmanager
def embedded_server(repository: Path, spec: Path | None) -> Iterator["TritonServer"]:  # noqa: F821
    """Build the cpu profile in a temporary directory and serve it on free loopback ports."""
    from harness.repository import build_cpu_profile
    from harness.server import TritonServer, free_port

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embedded-", dir=BUILD_DIR) as tmp:
        repo = build_cpu_profile(repository, Path(tmp) / "repository", spec)
        server = TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
        with console.status("starting the embedded Triton server (cpu profile)"):
            server.start()
        try:
            console.print(f"embedded Triton server ready: HTTP {server.http_url}, gRPC {server.grpc_url}")
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[TritonClient]:
    """A client to ``--url``, or to an embedded server started for this command."""
    with contextlib.ExitStack() as stack:
        if args.url:
            url = args.url
        else:
            server = stack.enter_context(embedded_server(args.repository, args.spec))
            url = server.url(args.protocol)
        client = stack.enter_context(TritonClient(url, args.protocol, timeout=args.timeout))
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({args.protocol}) is not reachable or not ready")
        yield client


def fail(message: str) -> int:
    console.print(f"[bold red]error:[/] {message}")
    return 2


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
