"""The preflight command line, shared by ``harness preflight`` and ``python3 -m harness.preflight``
(the latter in the Triton image, which has no other harness dependencies)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from harness.errors import ERROR_STATUS, CommandError, UsageError
from harness.manifest import MANIFEST_PATH, ManifestError, load_manifest
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY

DEFAULT_KNOWN_ANSWERS = BUILD_DIR / "preflight"


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
    parser.add_argument("--report", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """0: every check passed; 1: one failed. A set-up error (manifest, server unreachable)
    raises :class:`UsageError` (status 2, :mod:`harness.errors`)."""
    from contextlib import ExitStack

    from harness.client import TritonClient

    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None
    with ExitStack() as stack:
        url, metrics_url = args.url, args.metrics_url
        if url and not metrics_url:
            metrics_url = f"http://{url.rsplit(':', 1)[0]}:8002/metrics"
        if not url:
            from harness.repository import build_cpu_profile
            from harness.server import TritonServer, free_port

            repo = build_cpu_profile(args.repository, Path(stack.enter_context(_tmpdir())) / "repository")
            server = stack.enter_context(TritonServer(repo, http_port=free_port(), grpc_port=free_port(),
                                                      metrics_port=free_port()))
            url, metrics_url = server.url(args.protocol), server.metrics_url

        def client_factory():
            return TritonClient(url, args.protocol, timeout=args.timeout)

        client = stack.enter_context(client_factory())
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({args.protocol}) is not reachable or not ready")
        from harness.preflight import known_answers, passed, profile_of, run_checks

        profile = profile_of(client)
        if args.record:
            return _record(client, args, profile)
        try:
            known = known_answers.load(args.known_answers)
        except FileNotFoundError as exc:
            print(f"warning: {exc}", file=sys.stderr)
            known = None
        own_dir = known_answers.record_dir(args.known_answers, profile)
        own = known_answers.load(own_dir) if profile != "cpu" and (own_dir / known_answers.META).is_file() else None
        rows = run_checks(client, client_factory, manifest, known, repository=args.repository,
                          in_server_env=args.in_server_env, metrics_url=metrics_url, own=own)
    print(format_rows(rows, manifest))
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    ok = passed(rows)
    print(f"\npreflight {'PASSED' if ok else 'FAILED'}: {sum(r.status == 'pass' for r in rows)} passed, "
          f"{sum(r.status == 'fail' for r in rows)} failed, {sum(r.status == 'skip' for r in rows)} skipped, "
          f"{sum(r.status == 'info' for r in rows)} printed")
    return 0 if ok else 1


def _record(client, args, profile: str) -> int:
    from harness.manifest import decode_stack_versions
    from harness.preflight.known_answers import PHOTOS, record, record_dir
    from harness.preprocessing.dali_graph import production_arguments

    photos = [DEFAULT_PHOTOS / name for name in PHOTOS]
    missing = [str(p) for p in photos if not p.is_file()]
    if missing:
        raise UsageError(f"known-answer photos missing: {', '.join(missing)} (make setup gathers them)")
    out = record_dir(args.known_answers, profile)
    versions = decode_stack_versions() if args.in_server_env or profile == "cpu" else {}
    try:
        path = record(client, photos, out, production_arguments(args.repository), profile, versions)
    except OSError as exc:
        raise UsageError(f"cannot write the {profile} record to {out}: {exc.strerror or exc} "
                         "(in compose, build/preflight must be mounted writable to record)") from None
    print(f"known answers of {len(photos)} photos recorded from the {profile} profile in {path.parent}")
    return 0


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


def _tmpdir():
    import tempfile

    BUILD_DIR.mkdir(exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="preflight-", dir=BUILD_DIR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.preflight", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except CommandError as exc:  # the shared policy's status; no rich in the Triton image to print with
        print(f"error: {exc}", file=sys.stderr)
        return ERROR_STATUS
