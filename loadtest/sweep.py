"""The sweep: every ensemble x client count x protocol, one bounded Locust run each.

For each point: start the users, let them warm up (not measured), then measure for a
fixed duration (or until a number of requests), scraping Triton's metrics at both ends of
the window. Afterwards: the comparison table (Markdown and CSV), the server-side
breakdown per model, and PNG plots, all in ``--report``. The command line
(:data:`DESCRIPTION`, :data:`EXAMPLES`, :func:`add_arguments`) is ``harness loadtest`` and
``python -m loadtest.sweep`` alike.

Every answer is judged against the photo's answer alone (:mod:`loadtest.answers`, recorded
before a model's first point), unless ``--no-verify``.

Exit status (the harness's one policy, :mod:`harness.errors`): 0 every point was measured
and every good photo served its known answer; 1 a point had no successful request, a wrong
answer, an answer not verified, or a good photo failed
(bad payloads failing, ``--bad-fraction``, are expected, not a failure); 2 bad arguments,
the server (or Locust, or the metrics endpoint) unreachable, not ready or stopped, no
successful request in the whole sweep (nothing measured), or interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from harness.errors import UsageError, run_command
from harness.paths import DEFAULT_PHOTOS
from harness.validation import COUNT, FRACTION, MAX_TIMEOUT, SECONDS, THREADS, Number, Whole
from loadtest.locust_control import LocalLocust, LocustControl
from loadtest.metrics import breakdown, scrape
from loadtest.payloads import list_photos
from loadtest.result import Point, PointResult, SweepResult
from loadtest.stats import summarize
from loadtest.triton import Endpoints, ServerNotReady, check_inputs, check_ready, ensemble_models

DEFAULT_IMAGES = DEFAULT_PHOTOS
DEFAULT_OUT = Path("build") / "loadtest"  # under the folder it runs in
ENSEMBLES = ("classify_dali", "classify_opencv")
PROTOCOLS = ("grpc", "http")
MAX_CLIENTS = 10_000
"""The most concurrent users of a point: Locust's users are greenlets, yet more is a typing mistake."""


@dataclass(frozen=True)
class SweepConfig:
    """What to run; defaults are the issue's sweep (1, 5, 10 clients, both ensembles and protocols)."""

    ensembles: tuple[str, ...] = ENSEMBLES
    clients: tuple[int, ...] = (1, 5, 10)
    protocols: tuple[str, ...] = PROTOCOLS
    warmup: float = 5.0
    """Seconds of load before measuring (not counted)."""
    duration: float = 20.0
    """Seconds measured per point (the bound when ``requests`` is also given)."""
    requests: int | None = None
    """Stop measuring a point after this many requests (or ``duration``, whichever first)."""
    bad_fraction: float = 0.0
    request_timeout: float = 60.0
    client: str | None = None
    """``file.py:name``: the client's preprocessing the users run on each photo (``--client``)."""
    verify: bool = True
    """Judge every answer against the photo's answer alone (:mod:`loadtest.answers`)."""


def sweep_points(config: SweepConfig) -> list[Point]:
    """Protocol by protocol, client count by client count, the ensembles side by side (so
    a slow drift of the machine affects both ensembles of a comparison alike)."""
    return [Point(p, e, c) for p in config.protocols for c in config.clients for e in config.ensembles]


def run_point(locust: LocustControl, endpoints: Endpoints, point: Point, config: SweepConfig,
              models: list[str], record_id: str = "") -> PointResult:
    """One bounded run: spawn, warm up, measure, stop. The points given one ``record_id`` share
    each model's known answers (recorded at the first; empty: recorded at every point)."""
    locust.swarm(point.clients, endpoints.url(point.protocol), protocol=point.protocol, ensemble=point.ensemble,
                 bad_fraction=config.bad_fraction, request_timeout=config.request_timeout, client=config.client or "",
                 no_verify=str(not config.verify).lower(), record_id=record_id)
    try:
        # The first point of a model and protocol starts after its known answers are recorded, one
        # photo at a time (on the cpu profile about 0.5 s a photo for the detector).
        locust.wait_running(point.clients, timeout=300.0)
        time.sleep(config.warmup)
        locust.reset_stats()
        start = locust.open_window()
        before = scrape(endpoints.metrics)
        deadline = time.monotonic() + config.duration
        while time.monotonic() < deadline:
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            if config.requests and locust.progress()["count"] >= config.requests:
                break
        after = scrape(endpoints.metrics)
        end = locust.close_window()
        start, end, samples = locust.samples()
    finally:
        locust.stop()
    return PointResult(point, summarize(samples, start, end), tuple(breakdown(before, after, m) for m in models))


def run_sweep(locust: LocustControl, endpoints: Endpoints, config: SweepConfig,
              on_point: Callable[[Point, PointResult | None], None] = lambda point, result: None) -> list[PointResult]:
    """Every point of the sweep in turn; ``on_point`` is told before (``None``) and after each."""
    models = {e: ensemble_models(endpoints, e) for e in config.ensembles}
    record_id = f"sweep-{os.getpid()}-{time.time():.0f}"  # this sweep's known answers, in a long-lived master too
    results = []
    for point in sweep_points(config):
        on_point(point, None)
        result = run_point(locust, endpoints, point, config, models[point.ensemble], record_id)
        results.append(result)
        on_point(point, result)
    return results


# --- command line ---

DESCRIPTION = ("Every model x client count x protocol, one bounded Locust run each: the users warm up (not measured), "
               "then each point is measured for --duration seconds (or --requests requests), Triton's metrics scraped "
               "at both ends of the window. Writes the comparison table (Markdown and CSV), the server-side breakdown "
               "per model and PNG plots in --report, and prints the tables.")
EXAMPLES = """examples:
  the embedded server (cpu profile), local Locust:
    harness loadtest
  a running server (its HTTP endpoint on 8000, its metrics on 8002):
    harness loadtest --url 127.0.0.1:8001 --protocol grpc
  docker compose's Locust master:
    harness loadtest --url triton:8001 --protocol grpc --locust http://locust-master:8089
  the text detector, GPU vs CPU decode:
    harness loadtest --model detect_dali --model detect_opencv"""


def epilog() -> str:
    from harness.arguments import epilog as command_epilog

    return command_epilog("every point measured and every good photo served its known answer",
                          "a point had no successful request, a wrong answer (unlike the photo's answer alone), "
                          "an answer not verified, or a good photo failed (bad payloads of "
                          "--bad-fraction failing are expected)",
                          "bad arguments; the server, Locust or the metrics unreachable, not ready or stopped; "
                          "nothing measured at all; or interrupted", EXAMPLES)


def add_arguments(parser: argparse.ArgumentParser):
    """The sweep's options (shared by ``python -m loadtest.sweep`` and ``harness loadtest``);
    the :class:`~harness.arguments.Groups` that parse them."""
    from harness.arguments import DeploymentArgs, Groups, OutputArgs, ServerArgs, alias
    from loadtest.report import LOADTEST_REPORTS

    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--clients", nargs="+", type=Whole(1, MAX_CLIENTS), default=[1, 5, 10], metavar="N",
                       help="concurrent users of each point (default: %(default)s)")
    sweep.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS), metavar="PROTOCOL",
                       help=f"the protocols swept, of {', '.join(PROTOCOLS)} (not --protocol: the protocol of --url) "
                            "(default: %(default)s)")
    sweep.add_argument("--warmup", type=SECONDS, default=5.0, help="seconds before measuring (default: %(default)s)")
    sweep.add_argument("--duration", type=Number(None, MAX_TIMEOUT, above=0.0), default=20.0,
                       help="seconds measured per point (default: %(default)s)")
    sweep.add_argument("--requests", type=COUNT, default=None,
                       help="end a point after this many requests (still at most --duration seconds)")
    sweep.add_argument("--bad-fraction", type=FRACTION, default=0.0,
                       help="share of requests with a bad payload, counted as errors by type (default: %(default)s)")
    sweep.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="photos to send (default: %(default)s)")
    sweep.add_argument("--no-verify", action="store_true",
                       help="do not judge each answer against the photo's answer alone (recorded one request at a "
                            "time before a model's first point); to measure what the judging costs")
    load = parser.add_argument_group("load generator")
    load.add_argument("--locust", default=None, metavar="URL",
                      help="drive this running Locust master (e.g. http://locust-master:8089) instead of "
                           "starting Locust here")
    workers = load.add_argument("--locust-workers", type=Whole(0, THREADS.maximum), default=0, metavar="N",
                                help="start Locust in distributed mode here: a master and N worker processes "
                                     "(default: %(default)s, one process)")
    alias(load, "--workers", workers)
    deployment = DeploymentArgs(("model", "client"), several=True, notes={
        "model": "--model A --model B compares A with B, e.g. the text detector's GPU and CPU decode: --model "
                 "detect_dali --model detect_opencv, a detector being asked for its BOXES and SCORES "
                 f"(default: {' and '.join(ENSEMBLES)})",
        "client": "run by each Locust user on each photo before its request (the file must be on every worker)"})
    groups = Groups(parser, deployment=deployment,
                    server=ServerArgs(60.0, metrics=True, ports=True, legacy_protocol="http"),
                    output=OutputArgs(DEFAULT_OUT, LOADTEST_REPORTS, help="reports go here", old=("--out",)))
    model = next(a for a in parser._actions if "--model" in a.option_strings)
    alias(parser, "--ensembles", model, use="--model NAME (repeated)", nargs="+", each=True)
    timeout = next(a for a in parser._actions if "--timeout" in a.option_strings)
    alias(parser, "--request-timeout", timeout)
    return groups


@dataclass(frozen=True)
class SweepOptions:
    """What a sweep is asked to do: the command line's options (defaults are its defaults)."""

    config: SweepConfig = SweepConfig()
    endpoints: Endpoints | None = None
    """A running server's endpoints; None: the embedded server (cpu profile)."""
    locust: str | None = None
    """A running Locust master's web UI to drive; None: Locust started here."""
    workers: int = 0
    """Locust workers started here (0: one process)."""
    images: Path = DEFAULT_IMAGES
    out: Path = DEFAULT_OUT
    formats: tuple[str, ...] | None = None
    """``--format`` (None: results.json, the Markdown and CSV tables; the plots always)."""


def config_from_args(args: argparse.Namespace, parsed) -> SweepConfig:
    """The sweep's :class:`SweepConfig` (``parsed``: the groups' values); raises
    :class:`~harness.errors.UsageError` for a bad value."""
    if any(c < 1 for c in args.clients):
        raise UsageError("client counts must be >= 1")
    if not 0.0 <= args.bad_fraction < 1.0:
        raise UsageError("--bad-fraction must be in [0, 1)")
    if args.duration <= 0 or args.warmup < 0:
        raise UsageError("--duration must be > 0 and --warmup >= 0")
    deployed = parsed.deployment
    if deployed.client and not deployed.models:
        raise UsageError("--client needs --model: the model on the server its tensors are sent to")
    return SweepConfig(deployed.models or ENSEMBLES, tuple(args.clients), tuple(args.protocols), args.warmup,
                       args.duration, args.requests, args.bad_fraction, parsed.server.timeout, deployed.client,
                       not args.no_verify)


def endpoints_of(server) -> Endpoints | None:
    """The endpoints a :class:`~harness.arguments.Server` names (None: no ``--url``, the
    embedded server): ``--url`` for its protocol, the other protocol on the same host at
    its port (default Triton's), the metrics at ``--metrics-url`` (default port 8002)."""
    from loadtest.triton import DEFAULT_PORTS, split_host_port

    if server.url is None:
        return None
    try:
        host, port = split_host_port(server.url, DEFAULT_PORTS[server.protocol])
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    if server.ports.get(server.protocol, port) != port:
        raise UsageError(f"--{server.protocol}-port {server.ports[server.protocol]}: the {server.protocol} endpoint "
                         f"is --url, port {port}")
    address = {p: f"{host}:{port}" if p == server.protocol else f"{host}:{server.ports.get(p, DEFAULT_PORTS[p])}"
               for p in ("http", "grpc")}
    address.update(server.addresses)  # a deprecated --grpc-url: as it was given
    return Endpoints(address["http"], address["grpc"],
                     server.metrics_url or f"http://{host}:{DEFAULT_PORTS['metrics']}/metrics")


def options_from_args(args: argparse.Namespace, groups) -> SweepOptions:
    """The :class:`SweepOptions` :func:`add_arguments`' options parse into."""
    parsed = groups.parse(args)
    return SweepOptions(config_from_args(args, parsed), endpoints_of(parsed.server), args.locust,
                        args.locust_workers, args.images, parsed.output.report, parsed.output.formats)


@contextlib.contextmanager
def _embedded_server() -> Iterator[Endpoints]:
    try:
        from harness.paths import DEFAULT_REPOSITORY
        from harness.session import embedded_server
    except ImportError:
        raise ServerNotReady("no --url given and the harness package (embedded server) is not installed") from None
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        yield server


def make_console():
    """The sweep's messages and progress: stderr, whole lines (no 80-column wraps in logs)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def run(options: SweepOptions, start_server: Callable[[], ContextManager] | None = None,
        console=None) -> SweepResult:
    """Run the sweep ``options`` describe and write its reports in ``options.out``;
    ``start_server`` makes the embedded server (a context manager yielding an object with
    ``http_url``, ``grpc_url``, ``metrics_url``); ``console`` (rich) shows the progress.

    Raises the harness's errors (status 2, :mod:`harness.errors`) before anything is written
    for bad options or a server or Locust that is not there, and during the run if one of
    them stops; see :meth:`SweepResult.exit_status` for the verdict."""
    config = options.config
    console = console or make_console()
    with contextlib.ExitStack() as stack:
        if options.endpoints is not None:
            endpoints = options.endpoints
        else:
            server = stack.enter_context((start_server or _embedded_server)())
            endpoints = Endpoints(server.http_url, server.grpc_url, server.metrics_url)
        check_ready(endpoints, list(config.ensembles), list(config.protocols))
        photos = list_photos(options.images) if options.images.is_dir() else []
        check_inputs(endpoints, list(config.ensembles), config.client, photos[0].read_bytes() if photos else None)
        if options.locust:
            locust = LocustControl(options.locust)
            locust.check()
            if locust.is_master():  # a master without workers runs no users
                locust.wait_workers()
        else:
            if not options.images.is_dir():
                raise UsageError(f"image directory not found: {options.images}")
            locust = stack.enter_context(LocalLocust({"images": options.images}, options.workers,
                                                     log_dir=options.out / "logs"))
        mode = f"Locust at {options.locust} ({locust.worker_count()} workers)" if options.locust else (
            f"local Locust, master + {options.workers} workers" if options.workers else "local Locust")
        console.print(f"sweeping {endpoints.http} (HTTP) / {endpoints.grpc} (gRPC) with {mode}")
        started, load_before = dt.datetime.now(dt.timezone.utc), os.getloadavg()
        results = _run_with_progress(locust, endpoints, config, console)
        finished, load_after = dt.datetime.now(dt.timezone.utc), os.getloadavg()

    from loadtest.report import write_report

    meta = {
        "date": started.date().isoformat(),
        "started": started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "server": {"http": endpoints.http, "grpc": endpoints.grpc, "metrics": endpoints.metrics,
                   "embedded_cpu_profile": options.endpoints is None},
        "load_generator": mode,
        # Other work on the machine skews the figures: the 1, 5, 15-minute load averages say how busy it was.
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "config": {**config.__dict__, "ensembles": list(config.ensembles), "clients": list(config.clients),
                   "protocols": list(config.protocols)},
    }
    return SweepResult(results, write_report(results, options.out, meta, options.formats), meta)


def print_result(result: SweepResult, console) -> None:
    """The comparison and breakdown tables on stdout; the reports written and the findings on ``console``."""
    from loadtest.report import breakdown_markdown, comparison_markdown

    sys.stdout.write(comparison_markdown(result.results) + "\n\n" + breakdown_markdown(result.results) + "\n")
    console.print("reports: " + ", ".join(str(p) for p in result.paths))
    for finding in result.findings():
        console.print(finding)


def _run_with_progress(locust, endpoints, config, console) -> list[PointResult]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    points = sweep_points(config)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} points"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("sweep", total=len(points))

        def on_point(point: Point, result: PointResult | None) -> None:
            if result is None:
                progress.update(task, description=f"{point.protocol} {point.ensemble} x{point.clients}")
                return
            progress.advance(task)
            s = result.stats
            console.print(f"{point.protocol:4} {point.ensemble:16} {point.clients:3} clients: {s.qps:7.1f} QPS, "
                          f"TP50 {s.p50_ms:7.1f} ms, TP99 {s.p99_ms:7.1f} ms, {s.error_count} errors"
                          + (f", {s.wrong_answers} wrong answers of {s.verified}" if s.verified else ""))

        return run_sweep(locust, endpoints, config, on_point)


def main(argv: list[str] | None = None) -> int:
    """``python -m loadtest.sweep``: parse, run, print; the exit status of :class:`SweepResult`,
    or 2 with one line for the harness's errors (:func:`harness.errors.run_command`)."""
    from rich.markup import escape

    from harness.arguments import ArgumentParser

    parser = ArgumentParser(prog="python -m loadtest.sweep", description=DESCRIPTION, epilog=epilog())
    groups = add_arguments(parser)
    args = parser.parse_args(argv)
    out = make_console()

    def sweep() -> int:
        result = run(options_from_args(args, groups), console=out)
        print_result(result, out)
        return result.exit_status()

    return run_command(sweep, lambda message: out.print(f"[bold red]error:[/] {escape(message)}"))


if __name__ == "__main__":
    sys.exit(main())
