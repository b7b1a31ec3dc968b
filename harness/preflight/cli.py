"""The preflight command line, shared by ``harness preflight`` and ``python3 -m harness.preflight``
(the latter in the Triton image, which has no other harness dependencies): it parses into
:class:`~harness.preflight.job.PreflightOptions`, runs :func:`harness.preflight.job.run` and
prints a plain table (no rich in the Triton image).

Exit status (the harness's one policy, :mod:`harness.errors`): 0 every check passed (or
``--record`` wrote the record); 1 a check failed (known answers missing included); 2 set-up:
a manifest it cannot read, the server not reachable or not ready, photos missing or a record
it cannot write, or interrupted."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import run_command
from harness.manifest import MANIFEST_PATH
from harness.paths import DEFAULT_REPOSITORY
from harness.preflight.job import DEFAULT_KNOWN_ANSWERS, DEFAULT_TIMEOUT, PreflightOptions, PreflightResult, preflight_reports
from harness.report.formats import add_format_arg

DESCRIPTION = ("Versions, DALI schema, engine, known-answer photos through both ensembles and the taps model, and "
               "bad-image isolation; a pass/fail table. Exit status: 0 every check passed (or the record was "
               "written), 1 a check failed, 2 set-up (manifest, server unreachable or not ready, photos missing, "
               "record not writable).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="HOST:PORT of the server; default: start the embedded server (cpu profile)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="grpc", help="default: %(default)s")
    parser.add_argument("--metrics-url", help="Triton's metrics endpoint (default: port 8002 of --url's host)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST_PATH, help="default: deploy/versions.toml")
    parser.add_argument("--known-answers", type=Path, default=DEFAULT_KNOWN_ANSWERS,
                        help="directory of the cpu profile's recorded known answers; a GPU host's own record is "
                             "its gpu/ folder (default: build/preflight)")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                        help="the model repository the server serves (default: model_repository)")
    parser.add_argument("--in-server-env", action="store_true",
                        help="this process runs in the server's own environment (the Triton image, or the embedded "
                             "server's virtualenv): also check its DALI, TensorRT, CUDA, Python and DALI schema")
    parser.add_argument("--record", action="store_true",
                        help="record the server's known answers and stop: the cpu profile's (make setup does) or, on "
                             "a GPU host, its own, which later runs hold it to (in KNOWN_ANSWERS/gpu)")
    parser.add_argument("--photos", type=Path,
                        help="with --record: read the known-answer photos from this folder (make setup: data/photos); "
                             "default: the very bytes the cpu record in KNOWN_ANSWERS holds, so every record answers "
                             "for the same files")
    parser.add_argument("--report", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request (default: %(default)s)")
    parser.add_argument("--task", choices=("classification", "embedding", "detection"), default="classification",
                        help="embedding: the embedder and its ensembles must be ready too; detection: the text "
                             "detector's models, its engine and its known answers (boxes) too (default: %(default)s)")
    add_format_arg(parser, preflight_reports(Path("preflight.json")))


def options_from_args(args: argparse.Namespace) -> PreflightOptions:
    return PreflightOptions(args.url, args.protocol, args.metrics_url, args.manifest, args.known_answers,
                            args.repository, args.in_server_env, args.record, args.report, args.timeout, args.photos,
                            args.task, args.formats)


def run(args: argparse.Namespace) -> int:
    """Run the preflight ``args`` describe and print it; the result's exit status. A set-up
    error raises (:class:`~harness.errors.UsageError`: status 2, :mod:`harness.errors`)."""
    from harness.preflight.job import run as run_preflight

    result = run_preflight(options_from_args(args))
    print_result(result)
    return result.exit_status()


def print_result(result: PreflightResult) -> None:
    """The table and the verdict on stdout (or, after ``--record``, where the record went)."""
    from harness.preflight import FAIL, INFO, PASS, SKIP, passed

    if result.recorded is not None:
        print(f"known answers of {result.photos} photos recorded from the {result.profile} profile in "
              f"{result.recorded.parent}")
        return
    print(format_rows(result.rows, result.manifest))
    print(f"\npreflight {'PASSED' if passed(result.rows) else 'FAILED'}: {result.count(PASS)} passed, "
          f"{result.count(FAIL)} failed, {result.count(SKIP)} skipped, {result.count(INFO)} printed")


def format_rows(rows, manifest) -> str:
    """A plain table (no rich in the Triton image): check, status, the record compared with,
    expected, found, detail."""
    head = f"preflight against the manifest: Triton {manifest.release} (server {manifest.server.version}, " \
           f"DALI {manifest.dali.version}, TensorRT {manifest.tensorrt.version}, CUDA {manifest.cuda.version})"
    table = [("check", "status", "record", "expected", "found", "detail")] + [
        (r.check, r.status.upper() if r.status == "fail" else r.status, r.record, r.expected, r.found, r.detail)
        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths)) + "  " + row[5] for row in table]
    return "\n".join([head, "", *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.preflight", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    # The shared policy; no rich in the Triton image to print with.
    return run_command(lambda: run(args), lambda message: print(f"error: {message}", file=sys.stderr))
