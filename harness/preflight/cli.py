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

from harness.arguments import ArgumentParser, Groups, OutputArgs, RepositoryArgs, ServerArgs, add_task, epilog
from harness.errors import run_command
from harness.manifest import MANIFEST_PATH
from harness.preflight import FAIL, INFO, PASS, SKIP, passed
from harness.preflight.job import DEFAULT_KNOWN_ANSWERS, DEFAULT_TIMEOUT, PreflightOptions, PreflightResult, preflight_reports
from harness.preflight.job import run as run_preflight

DESCRIPTION = ("Versions, DALI schema, engine, known-answer photos through both ensembles and the taps model, and "
               "bad-image isolation; a pass/fail table.")
EPILOG = epilog("every check passed (or the record was written)", "a check failed",
                "set-up (manifest, server unreachable or not ready, photos missing, record not writable)")


def add_arguments(parser: argparse.ArgumentParser) -> Groups:
    """The preflight's options on ``parser``; the groups that parse them."""
    parser.add_argument("--manifest", type=Path, default=MANIFEST_PATH, metavar="FILE",
                        help="the production manifest: the versions the GPU host must run (default: deploy/versions.toml)")
    parser.add_argument("--known-answers", type=Path, default=DEFAULT_KNOWN_ANSWERS, metavar="DIR",
                        help="directory of the cpu profile's recorded known answers; a GPU host's own record is "
                             "its gpu/ folder (default: build/preflight)")
    parser.add_argument("--in-server-env", action="store_true",
                        help="this process runs in the server's own environment (the Triton image, or the embedded "
                             "server's virtualenv): also check its DALI, TensorRT, CUDA, Python and DALI schema")
    parser.add_argument("--record", action="store_true",
                        help="record the server's known answers and stop: the cpu profile's (make setup does) or, on "
                             "a GPU host, its own, which later runs hold it to (in KNOWN_ANSWERS/gpu)")
    parser.add_argument("--photos", type=Path, metavar="DIR",
                        help="with --record: read the known-answer photos from this folder, as make setup does from "
                             "data/photos (default: the very bytes the cpu record in KNOWN_ANSWERS holds, so every "
                             "record answers for the same files)")
    add_task(parser, default="classification",
             note="embedding: the embedder and its ensembles must be ready too; detection: the text detector's "
                  "models, its engine and its known answers (boxes) too (default: %(default)s)")
    return Groups(parser, server=ServerArgs(DEFAULT_TIMEOUT, metrics=True), repository=RepositoryArgs(spec=False),
                  output=OutputArgs(None, preflight_reports(Path("preflight.json")), metavar="FILE",
                                    help="also write the rows to this JSON file"))


def options_from_args(args: argparse.Namespace, groups: Groups) -> PreflightOptions:
    parsed = groups.parse(args)
    server = parsed.server
    return PreflightOptions(server.url, server.protocol, server.metrics_url, args.manifest, args.known_answers,
                            parsed.repository.repository, args.in_server_env, args.record, parsed.output.report,
                            server.timeout, args.photos, args.task, parsed.output.formats)


def run(args: argparse.Namespace, groups: Groups) -> int:
    """Run the preflight ``args`` describe and print it; the result's exit status. A set-up
    error raises (:class:`~harness.errors.UsageError`: status 2, :mod:`harness.errors`)."""
    result = run_preflight(options_from_args(args, groups))
    print_result(result)
    return result.exit_status()


def print_result(result: PreflightResult) -> None:
    """The table and the verdict on stdout (or, after ``--record``, where the record went)."""
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
    parser = ArgumentParser(prog="python3 -m harness.preflight", description=DESCRIPTION, epilog=EPILOG)
    groups = add_arguments(parser)
    args = parser.parse_args(argv)
    # The shared policy; no rich in the Triton image to print with.
    return run_command(lambda: run(args, groups), lambda message: print(f"error: {message}", file=sys.stderr))
