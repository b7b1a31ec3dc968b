"""Locust users calling the Triton ensembles through tritonclient, over gRPC or HTTP.

Each user is one client in a closed loop: it sends one photo of the corpus (rotating
through them) to the ensemble and sends the next as soon as the answer arrives. Every
request is reported through Locust's ``request`` event with its real response time,
response size and error; listeners below collect exact per-request samples for the
sweep (:mod:`loadtest.sweep`), which reads them through two web routes.

Run it on its own, with the web UI or headless::

    locust -f loadtest/locustfile.py --host 127.0.0.1:8001                # web UI on :8089
    locust -f loadtest/locustfile.py --headless -u 5 -r 5 -t 30s \\
        --host http://127.0.0.1:8000 --ensemble classify_opencv --bad-fraction 0.05

Options (each also an environment variable; defaults in brackets):

- ``--host``: Triton's address; ``grpc://h:p`` or ``http://h:p`` choose the protocol,
  a bare ``h:p`` uses ``--protocol`` (``LOCUST_HOST``);
- ``--protocol`` grpc|http [grpc] (``LOCUST_PROTOCOL``);
- ``--ensemble`` any model with an encoded-image input [classify_dali] (``LOCUST_ENSEMBLE``):
  its input (UINT8 ``[-1]`` or BYTES ``[1]``, batched or not) and its scores output
  (probabilities preferred) are read from its config when the user starts; a detector's
  (``detect_dali``, ``detect_opencv``: outputs ``BOXES`` and ``SCORES``) is asked for its boxes
  and scores, as a client of the detector would;
- ``--client`` ``FILE.py:NAME``: the client's own preprocessing (file bytes -> the model's input
  tensor, or a dict by input name), run in the user on every photo before the request, for a
  model fed tensors rather than files (``LOCUST_CLIENT``; the file must be on every worker);
- ``--images`` directory of photos [data/photos of this project] (``LOCUST_IMAGES``);
- ``--bad-fraction`` share of requests sent with a bad payload [0] (``LOCUST_BAD_FRACTION``);
- ``--request-timeout`` seconds [60] (``LOCUST_REQUEST_TIMEOUT``);
- ``--no-verify``: do not check the answers (``LOCUST_NO_VERIFY``).

Every answer is checked (:mod:`loadtest.answers`): before the users start, each photo is sent
alone, one request at a time, and its answer kept (a headless run records when Locust starts;
a test started from the web UI records afresh; the sweep's points share one record per model and
protocol, ``--record-id``; the master sends the record to its workers); every answer to a photo
under load is then judged against it, after the request's time is taken. A different answer is
a failure of type ``wrong answer``, its detail logged once.

Distributed: ``locust -f loadtest/locustfile.py --master`` and any number of
``locust -f loadtest/locustfile.py --worker --master-host HOST``.

Depends only on locust, gevent, tritonclient and numpy (the Locust image stays slim), shapely
for a detector's boxes (:mod:`loadtest.answers`), and on ``harness.deployment``'s discovery,
which needs nothing more (the image mounts ``harness/``).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import gevent
import grpc.experimental.gevent as grpc_gevent

# gRPC's own I/O threads would block the gevent loop Locust runs on: make gRPC use gevent.
# Must happen before any gRPC channel exists.
grpc_gevent.init_gevent()

from locust import User, constant, events, task  # noqa: E402
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner  # noqa: E402

try:
    import loadtest  # noqa: F401
except ImportError:  # loaded by path (`locust -f loadtest/locustfile.py`): make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.validation import FRACTION, TIMEOUT  # noqa: E402
from loadtest.answers import WRONG_ANSWER, KnownAnswers, photo_key  # noqa: E402
from loadtest.inference import TritonInferClient, as_request_failure, record_answers  # noqa: E402
from loadtest.payloads import PayloadSchedule, list_photos  # noqa: E402
from loadtest.responses import RequestFailed  # noqa: E402
from loadtest.samples import PHOTO, Sample, WindowRecorder, error_type  # noqa: E402
from loadtest.triton import target_address  # noqa: E402

DEFAULT_IMAGES = Path(__file__).resolve().parents[1] / "data" / "photos"
logger = logging.getLogger("loadtest")


@events.init_command_line_parser.add_listener
def add_arguments(parser) -> None:
    group = parser.add_argument_group("Triton load test (loadtest/locustfile.py)")
    group.add_argument("--protocol", choices=["grpc", "http"], default="grpc", env_var="LOCUST_PROTOCOL",
                       help="tritonclient protocol when --host has no grpc:// or http:// scheme (default: grpc)")
    group.add_argument("--ensemble", default="classify_dali", env_var="LOCUST_ENSEMBLE",
                       help="model to call: classify_dali (GPU decode) or classify_opencv (CPU decode); the text "
                            "detector's detect_dali or detect_opencv; any model with an image input")
    group.add_argument("--client", default="", env_var="LOCUST_CLIENT",
                       help="FILE.py:NAME: your client's preprocessing, run on each photo; its tensors are sent")
    group.add_argument("--images", default=str(DEFAULT_IMAGES), env_var="LOCUST_IMAGES",
                       help="directory of photos sent in turn (default: the project's data/photos)")
    group.add_argument("--bad-fraction", type=FRACTION, default=0.0, env_var="LOCUST_BAD_FRACTION",
                       help="share of requests sent with a bad payload (truncated JPEG or not an image)")
    group.add_argument("--request-timeout", type=TIMEOUT, default=60.0, env_var="LOCUST_REQUEST_TIMEOUT",
                       help="seconds before a request fails with a timeout (default: 60)")
    group.add_argument("--no-verify", action="store_true", default=False, env_var="LOCUST_NO_VERIFY",
                       help="do not check each answer against the photo's answer alone (measures the check's cost)")
    # On the parser itself: only its arguments can stay out of the web UI's form.
    parser.add_argument("--record-id", default="", env_var="LOCUST_RECORD_ID", include_in_web_ui=False,
                       help="known answers are recorded once per value and target (the sweep sets one per sweep); "
                            "empty: each test started from the web UI records afresh")


@functools.lru_cache(maxsize=4)
def load_photos(directory: str) -> list[bytes]:
    """The photos' bytes, read once per process."""
    return [p.read_bytes() for p in list_photos(Path(directory))]


_user_numbers = itertools.count()


class TritonUser(User):
    """One client: one photo per request, the next request as soon as the answer arrives."""

    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.protocol, self.url = target_address(self.environment.host, options.protocol)
        self.ensemble = options.ensemble
        self.schedule = PayloadSchedule(load_photos(options.images), options.bad_fraction, start=next(_user_numbers))
        self.triton = TritonInferClient(self.protocol, self.url, options.request_timeout, self.ensemble,
                                        getattr(options, "client", ""))
        self.in_flight: gevent.Greenlet | None = None
        self.verify = not options.no_verify

    def on_stop(self) -> None:
        if not hasattr(self, "triton"):  # on_start may have failed (e.g. no --host)
            return
        # The request in flight when the test stopped ends first (its answer is not counted):
        # a greenlet killed inside a gRPC call leaves gRPC's core locked, and the interpreter
        # then hangs at exit, after the summary (seen on 1 run in 3 on the detector).
        if self.in_flight is not None:
            self.in_flight.join(timeout=self.environment.parsed_options.request_timeout)
        self.triton.close()

    @task
    def infer(self) -> None:
        payload, data = self.schedule.next()
        start_time = time.time()
        started = time.perf_counter()
        size, answer, failure = 0, None, None
        try:
            # In a greenlet of its own, which Locust's stop does not kill (see on_stop).
            self.in_flight = gevent.spawn(self.triton.infer, data)
            size, answer = self.in_flight.get()
        except Exception as exc:  # every failure is a result to count, never a crash of the user
            failure = as_request_failure(exc)
        latency_ms = (time.perf_counter() - started) * 1000.0
        verified = False
        if answer is not None and payload == PHOTO and self.verify:  # judged off the clock
            judgement = known.answers.judge(photo_key(data), answer)
            verified = True if judgement else None  # None: no known answer to judge by
            if judgement and judgement.change:
                failure = RequestFailed(WRONG_ANSWER, judgement.change)
        self.environment.events.request.fire(
            request_type=self.protocol, name=self.ensemble, response_time=latency_ms, response_length=size,
            exception=failure, start_time=start_time, url=self.url,
            context={"payload": payload, "end": time.time(), "verified": verified},
        )


# --- Exit: without the interpreter's finalizers ---

_exit_code: list[int] = []


@events.quit.add_listener
def remember_exit_code(exit_code, **kwargs) -> None:
    _exit_code.append(exit_code)


@atexit.register  # registered before Locust's own handlers, so it runs after them
def exit_without_finalizers() -> None:
    """Once Locust has quit (its stats printed, its CSV files closed, its handlers run), end the
    process without the interpreter's last garbage collection: a gRPC object finalized there,
    with gevent's hub gone, can wait forever on gRPC's core lock (seen in about 1 run in 40 of a
    headless test, after the summary: the process never exits)."""
    if _exit_code:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_code[-1])


# --- Collecting samples (decoupled from the users: they only fire `request` events) ---

recorder = WindowRecorder()
"""The samples of the open measurement window, kept where the web UI runs (the master or the
single process)."""
_outbox: list[list] = []
"""On a worker: samples not yet sent to the master."""
_role = {"worker": False}
_logged_error_types: set[str] = set()


@events.request.add_listener
def collect_sample(request_type, name, response_time, response_length, exception, context=None, **kwargs) -> None:
    if not context or "payload" not in context:
        return  # not a request of TritonUser
    error = None
    if exception is not None:
        error = exception.error if isinstance(exception, RequestFailed) else error_type(str(exception), type(exception).__name__)
        if error not in _logged_error_types:  # the full message once per type, not once per request
            _logged_error_types.add(error)
            logger.warning("first '%s' error: %s", error, getattr(exception, "detail", exception))
    sample = Sample(context["end"], response_time, response_length, context["payload"], error, context["verified"])
    if _role["worker"]:
        _outbox.append(sample.as_row())
    else:
        recorder.add([sample])


@events.report_to_master.add_listener
def send_samples(client_id, data) -> None:
    # Runs in the worker's stats reporter: every sample recorded so far goes in this report.
    data["loadtest"] = {"samples": list(_outbox), "reported_at": time.time()}
    _outbox.clear()


@events.worker_report.add_listener
def receive_samples(client_id, data) -> None:
    report = data.get("loadtest")
    if report:
        recorder.add((Sample.from_row(row) for row in report["samples"]), source=client_id,
                     reported_at=report["reported_at"])


# --- The known answers (each photo's answer alone) the users judge by ---

@dataclass
class _Known:
    answers: KnownAnswers = field(default_factory=lambda: KnownAnswers({}))
    recorded: dict[tuple, KnownAnswers] = field(default_factory=dict)
    """Records by target, so that a sweep records once per model and protocol."""


known = _Known()


def record_known_answers(environment, reuse: bool = True) -> None:
    """Make :data:`known` the answers of the test's target: recorded now, one photo at a time
    with no user running, unless ``reuse`` and this process recorded them under the same
    ``--record-id`` (a sweep's points; a headless run's test start after its init)."""
    options = environment.parsed_options
    if options.no_verify or not environment.host:
        return
    protocol, url = target_address(environment.host, options.protocol)
    target = (protocol, url, options.ensemble, getattr(options, "client", ""), options.images, options.record_id)
    if not reuse or target not in known.recorded:
        photos = load_photos(options.images)
        # A warning, so it shows at the sweep's log level: the pause before the users start.
        logger.warning("recording the known answers of %s: %d photos, one at a time", options.ensemble, len(photos))
        try:
            client = TritonInferClient(protocol, url, options.request_timeout, options.ensemble, target[3])
        except Exception as exc:  # the users meet the same failure and count it as errors
            logger.error("cannot record the known answers of %s: %s", options.ensemble, as_request_failure(exc))
            known.answers = KnownAnswers({})
            return
        try:
            known.recorded[target], failures = record_answers(client, photos)
        finally:
            client.close()
        for failure in failures:  # failing alone, it fails under load too: an error there, not unverified
            logger.warning("no known answer for a photo: %s", failure)
    known.answers = known.recorded[target]


@events.test_start.add_listener
def on_test_start(environment, **kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        return  # the master's record arrives in a message
    # From the web UI, each test records afresh: the server may have been redeployed since.
    options = environment.parsed_options
    record_known_answers(environment, reuse=bool(options.record_id) or options.headless)
    if isinstance(runner, MasterRunner):  # sent before the spawn messages, so it arrives first
        runner.send_message("known_answers", known.answers.to_message())


def receive_known_answers(environment, msg, **kwargs) -> None:
    known.answers = KnownAnswers.from_message(msg.data)


@events.init.add_listener
def on_init(environment, runner=None, web_ui=None, **kwargs) -> None:
    _role["worker"] = isinstance(runner, WorkerRunner)
    if _role["worker"]:
        runner.register_message("known_answers", receive_known_answers)
    elif environment.parsed_options.headless:
        # Before the run's clock starts (it starts with test_start), so the record costs no run time.
        record_known_answers(environment)
    if web_ui is None:
        return
    from flask import jsonify, request

    def reporting_workers() -> list[str]:
        if not isinstance(runner, MasterRunner):
            return []
        return [w.id for w in runner.clients.all if w.state in (STATE_RUNNING, STATE_SPAWNING)]

    @web_ui.app.route("/loadtest/window", methods=["POST"])
    @web_ui.auth_required_if_enabled
    def window():
        """``action=open`` starts a measurement window now, ``action=close`` ends it."""
        action = request.form.get("action", "")
        now = time.time()
        if action == "open":
            recorder.open(now, reporting_workers())
        elif action == "close" and recorder.start is not None:
            recorder.close(now)
        else:
            return jsonify({"success": False, "message": f"bad action {action!r} (open, close after open)"}), 400
        return jsonify({"success": True, "action": action, "time": now})

    @web_ui.app.route("/loadtest/progress")
    @web_ui.auth_required_if_enabled
    def progress():
        return jsonify({"start": recorder.start, "end": recorder.end, "count": recorder.count(),
                        "complete": recorder.complete, "missing_workers": recorder.missing_sources})

    @web_ui.app.route("/loadtest/samples")
    @web_ui.auth_required_if_enabled
    def samples():
        return jsonify({"start": recorder.start, "end": recorder.end, "complete": recorder.complete,
                        "missing_workers": recorder.missing_sources,
                        "samples": [s.as_row() for s in recorder.samples]})
