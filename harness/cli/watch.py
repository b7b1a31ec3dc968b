"""``harness watch``: known-answer probes against a live server on a schedule, as Prometheus
metrics (see loadtest/watch.py), or one round (``--once``) for a Kubernetes CronJob.

Exit status (:mod:`harness.errors`), with ``--once``: 0 every answer was the known one; 1 a
wrong answer or a failed request; 2 bad arguments, nothing answered (the server unreachable)
or interrupted. Without it, the watch runs until SIGTERM or Ctrl-C (status 0).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path

from harness.arguments import DeploymentArgs, Groups, RepositoryArgs, ServerArgs, epilog
from harness.errors import EXIT_FOUND, EXIT_OK, NothingCompared, UsageError
from harness.paths import DEFAULT_PHOTOS, WORK_DIR
from harness.session import embedded_server
from harness.validation import COUNT, MAX_TIMEOUT, Number

DEFAULT_KNOWN_ANSWERS = WORK_DIR / "watch"
INTERVAL = Number(1.0, MAX_TIMEOUT)
"""``--interval``: a second to a day. A watch probes a server, it does not load it: rounds back to back
(``nan`` once ran 23,903 of them in 15 s) or a wait too long to sleep (``1e308``) are refused."""
EXAMPLES = """examples:
  every minute, metrics on 127.0.0.1:9108:
    harness watch --url 127.0.0.1:8001 --model classify_dali --model detect_dali
  one round pushed to a Pushgateway (a CronJob's):
    harness watch --url triton:8001 --once --push-gateway http://pushgateway:9091"""


def register(commands: argparse._SubParsersAction) -> None:
    from loadtest.watch import DEFAULT_LISTEN, DEFAULT_MODELS

    parser = commands.add_parser(
        "watch", help="known-answer probes against a live server on a schedule, as Prometheus metrics",
        description="Send a few photos with known answers to each model on a schedule, alone and in batches of the "
                    "sizes the served models form, and export per model and mode the agreement with the known "
                    "answers, the worst change, wrong answers, failed requests and the last success's time as "
                    "Prometheus metrics. The known answers are each photo's answer alone, recorded in --known-answers on "
                    "the first round that finds none for a model: record on a deployment you trust.",
        epilog=epilog("(--once) every answer was the known one; without --once, stopped by SIGTERM or Ctrl-C",
                      "(--once) a wrong answer or a failed request",
                      "bad arguments, nothing answered (the server unreachable), or interrupted", EXAMPLES))
    watch = parser.add_argument_group("watch")
    watch.add_argument("--images", type=Path, default=DEFAULT_PHOTOS, help="the photos' directory (default: %(default)s)")
    watch.add_argument("--photo-count", type=COUNT, default=4, metavar="N",
                       help="how many of them, by name (default: %(default)s)")
    watch.add_argument("--known-answers", type=Path, default=DEFAULT_KNOWN_ANSWERS, metavar="DIR",
                       help="where the watch keeps its known answers (default: %(default)s)")
    watch.add_argument("--interval", type=INTERVAL, default=60.0, help="seconds between rounds (default: %(default)s)")
    watch.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                       help="where the metrics are served (default: %(default)s; 0.0.0.0:9108 in a pod)")
    watch.add_argument("--once", action="store_true", help="one round, then exit (a CronJob's)")
    watch.add_argument("--push-gateway", default=None, metavar="URL",
                       help="with --once: push the metrics to this Prometheus Pushgateway")
    groups = Groups(parser, server=ServerArgs(30.0), deployment=DeploymentArgs(("model",), several=True, notes={
        "model": f"the models probed (default: {DEFAULT_MODELS}: classify_, embed_, detect_, ocr_ and segment_ "
                 "dali and opencv)"}), repository=RepositoryArgs())
    parser.set_defaults(run=lambda args: run_watch(args, groups))


def run_watch(args: argparse.Namespace, groups: Groups) -> int:
    from loadtest.payloads import list_photos
    from loadtest.watch import RECORD_FILE, Record, WatchOptions, listen_address, run, served_task_models, summary

    parsed = groups.parse(args)
    if not args.once:
        listen_address(args.listen)  # before any server is started: a bad --listen is one line, exit 2
    Record(args.known_answers / RECORD_FILE)  # likewise a record that cannot be used
    if args.push_gateway and not args.once:
        raise UsageError("--push-gateway needs --once (a running watch is scraped on --listen)")
    try:
        photos = {p.name: p.read_bytes() for p in list_photos(args.images)[:args.photo_count]}
    except FileNotFoundError as exc:
        raise UsageError(f"--images: {exc}") from None
    with contextlib.ExitStack() as stack:
        log = logging.getLogger("harness.watch")
        handler = logging.StreamHandler(sys.stderr)  # a running watch's log: each line with its time
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        stack.callback(log.removeHandler, handler)
        server = parsed.server
        url = server.url
        if url is None:
            paths = parsed.repository
            url = stack.enter_context(embedded_server(paths.repository, paths.spec)).url(server.protocol)
        models = tuple(parsed.deployment.models or served_task_models(url, server.protocol, server.timeout))
        options = WatchOptions(server.protocol, url, models, photos,
                               args.known_answers / RECORD_FILE, server.timeout, args.interval, args.once, args.listen,
                               args.push_gateway)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):  # a clean end of a running watch (restored after)
            stack.callback(signal.signal, sig, signal.signal(sig, lambda *_: stop.set()))
        probes = run(options, stop)
    sys.stdout.write(summary(probes) + "\n")
    if not args.once:
        return EXIT_OK  # stopped as asked; its findings were the metrics
    if not any(p.judgement for p in probes):
        raise NothingCompared(f"no probe was answered by {url}: nothing was compared")
    return EXIT_FOUND if any(p.judgement is None or p.judgement.change for p in probes) else EXIT_OK
