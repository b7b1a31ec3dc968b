"""``harness watch``: known-answer probes against a live server, as Prometheus metrics.

A deployment that passed preflight once can change its answers later: a new container's
decoder, an engine rebuilt by a new TensorRT, a changed batching setting. The watch sends a few
photos with known answers on a schedule and says, per model and way of sending, whether the
answers are still the known ones:

- ``alone``: each photo in a request of its own, one at a time;
- ``batched``: as many requests at once as each batch size the served model forms (its
  preferred batch sizes and its ``max_batch_size``, up to the photos there are), so that the
  server's dynamic batcher puts them in one batch: a batch-dependent engine is caught in
  production, not only in the lab (``harness repeat``).

The known answers are each photo's answer alone (:mod:`loadtest.answers`, judged by the same
rules as the load test's): kept in ``--known-answers`` (an ``.npz`` there), recorded on the first round that
finds none for a model (record once on a deployment you trust: after preflight passed), so
that a later redeployment is judged against them.

Metrics (``prometheus_client``; served on ``--listen``, or with ``--once`` pushed to a
Pushgateway for a Kubernetes CronJob), labels ``model`` and ``mode``:
``harness_watch_agreement`` (share of the last round's answers that were the known ones),
``harness_watch_worst_error`` (the last round's largest change: top-1 score, box corner pixels;
+Inf when a class or a box changed), ``harness_watch_wrong_answers_total``,
``harness_watch_probes_total``, ``harness_watch_probe_errors_total`` (requests that failed),
``harness_watch_last_success_timestamp_seconds`` (per model: the end of the last round the
server answered every probe: staleness), ``harness_watch_server_info`` (its version).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.errors import UsageError
from loadtest.answers import Judgement, KnownAnswers, photo_key
from loadtest.inference import TritonInferClient, as_request_failure, model_config, record_answers

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

MODES = ("alone", "batched")
logger = logging.getLogger("harness.watch")


@dataclass(frozen=True)
class Probe:
    """One answer of a round."""

    model: str
    mode: str
    judgement: Judgement | None
    """None: the request failed (``error`` says how)."""
    error: str | None = None


class RecordError(UsageError):
    """The watch's known answers cannot be used (not a record, too large, or not answers the
    watched model gives): one line, exit 2; the server is not blamed."""


MAX_RECORD_ARRAY_BYTES = 64 * 2 ** 20
"""The largest array a record may hold (a known answer: a segmenter's matte of a 4000 x 3000
photo is 48 MB), read from its ``.npy`` header before it is loaded: a 2 MB record can hold a
compressed 2 GB array."""
MAX_RECORD_BYTES = 512 * 2 ** 20
"""The most a whole record may hold, likewise."""


class Record:
    """The known answers of every watched model, in one ``.npz`` (``model|photo key|output``
    -> array; classification strings as fixed-width bytes). A file that is not such a record
    (corrupt, pickled objects, keys of another form, arrays over :data:`MAX_RECORD_ARRAY_BYTES`
    by their headers) is :class:`RecordError`, before any array is loaded."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.models: dict[str, KnownAnswers] = {}
        if not self.path.is_file():
            return
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                if not isinstance(npz, np.lib.npyio.NpzFile):
                    raise ValueError("one array, not an .npz of answers")
                sizes = {key: _stored_bytes(npz, key) for key in npz.files}
                for key, size in sizes.items():
                    if len(key.split("|")) != 3:
                        raise ValueError(f"a key {key!r} not of the form model|photo|output")
                    if size > MAX_RECORD_ARRAY_BYTES:
                        raise ValueError(f"{key} would take {size / 2 ** 20:.0f} MiB (at most "
                                         f"{MAX_RECORD_ARRAY_BYTES // 2 ** 20} MiB an answer)")
                if sum(sizes.values()) > MAX_RECORD_BYTES:
                    raise ValueError(f"its arrays would take {sum(sizes.values()) / 2 ** 20:.0f} MiB")
                for key in npz.files:
                    model, photo, output = key.split("|")
                    answers = self.models.setdefault(model, KnownAnswers({})).answers
                    answers.setdefault(photo, {})[output] = npz[key]
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
            raise RecordError(f"--known-answers: {self.path} is not a watch record ({exc}); move it away and the watch "
                              "records the answers anew") from None

    def misfit(self, model: str, exc: Exception) -> RecordError:
        """The error of a known answer of ``model`` that the rules cannot judge its answers by."""
        return RecordError(f"--known-answers: {self.path} holds answers of {model} unlike those it gives "
                           f"({type(exc).__name__}: {exc}); move it away and the watch records them anew")

    def save(self) -> None:
        arrays = {f"{model}|{photo}|{output}": (value.astype(bytes) if value.dtype == object else value)
                  for model, known in self.models.items() for photo, answer in known.answers.items()
                  for output, value in answer.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial.npz")
        np.savez(partial, **arrays)
        os.replace(partial, self.path)  # never a half-written record


def _stored_bytes(npz, key: str) -> int:
    """What array ``key`` of an ``.npz`` would take once loaded, from its ``.npy`` header alone."""
    with npz.zip.open(f"{key}.npy") as member:
        version = np.lib.format.read_magic(member)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(member)
    return math.prod(shape) * dtype.itemsize


MAX_TOGETHER = 16
"""The most requests a batched probe sends at once (a ``max_batch_size`` of 128 is probed at 16)."""


def batch_sizes(configs: list[dict]) -> list[int]:
    """The batch sizes (2 or more, at most :data:`MAX_TOGETHER`) the served models form: each
    dynamic batcher's preferred sizes and ``max_batch_size``; none without dynamic batching.
    ``configs``: the model's and, for an ensemble, its steps' (the steps batch, not the ensemble)."""
    sizes = set()
    for config in configs:
        top = int(config.get("max_batch_size", 0))
        if top >= 2 and "dynamic_batching" in config:
            preferred = [int(s) for s in config["dynamic_batching"].get("preferred_batch_size", [])]
            sizes |= {min(size, MAX_TOGETHER) for size in (*preferred, top) if size >= 2}
    return sorted(sizes)


def served_configs(client, protocol: str, model: str) -> list[dict]:
    """The config of ``model`` and of each model its ensemble steps run."""
    config = model_config(client, protocol, model)
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    return [config, *(model_config(client, protocol, step["model_name"]) for step in steps)]


class Watch:
    """Rounds of probes against one server; each round updates the metrics in ``registry``."""

    def __init__(self, protocol: str, url: str, models: list[str], photos: dict[str, bytes], record: Record,
                 timeout: float, registry: CollectorRegistry, success_registry: CollectorRegistry | None = None):
        """``success_registry`` (default ``registry``) holds the last success's time: a one-shot
        watch pushes it only after a success, so that the Pushgateway keeps the previous one."""
        from prometheus_client import Counter, Gauge, Info  # not at import: `harness --help` needs none

        self.protocol, self.url, self.models, self.timeout, self.record = protocol, url, models, timeout, record
        self.photos = list(photos.values())
        labels = ("model", "mode")
        self.agreement = Gauge("harness_watch_agreement", "Share of the last round's answers that were the known ones",
                               labels, registry=registry)
        self.worst = Gauge("harness_watch_worst_error", "The last round's largest change from a known answer "
                           "(top-1 score, or box corner pixels; +Inf: a class or a box changed)", labels,
                           registry=registry)
        self.wrong = Counter("harness_watch_wrong_answers", "Answers unlike the photo's known answer", labels,
                             registry=registry)
        self.probes = Counter("harness_watch_probes", "Known-answer requests sent", labels, registry=registry)
        self.errors = Counter("harness_watch_probe_errors", "Known-answer requests that failed", labels,
                              registry=registry)
        self.last_success = Gauge("harness_watch_last_success_timestamp_seconds",
                                  "End of the last round in which the server answered every probe", ["model"],
                                  registry=success_registry or registry)
        self.server = Info("harness_watch_server", "The watched server", registry=registry)
        for model in models:  # every series exists from the start (an alert on absent data needs none)
            for mode in MODES:
                for metric in (self.wrong, self.probes, self.errors):
                    metric.labels(model, mode)

    def _client(self, model: str) -> TritonInferClient:
        return TritonInferClient(self.protocol, self.url, self.timeout, model)

    def _ask(self, client: TritonInferClient, model: str, mode: str, data: bytes) -> Probe:
        try:
            answer = client.infer(data)[1]
        except Exception as exc:  # a failed request is a probe error, never the end of the watch
            return Probe(model, mode, None, str(as_request_failure(exc)))
        try:
            return Probe(model, mode, self.record.models[model].judge(photo_key(data), answer))
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # the record's fault, not the server's
            raise self.record.misfit(model, exc) from None

    def round(self) -> list[Probe]:
        """One round over every model; updates the metrics and returns the probes."""
        probes: list[Probe] = []
        self._server_info()
        for model in self.models:
            try:
                probes += self._model_round(model)
            except RecordError:
                raise
            except Exception as exc:  # unreachable, or the model is gone: every probe of the round failed
                failure = str(as_request_failure(exc))
                logger.warning("%s: %s", model, failure)
                probes += [Probe(model, mode, None, failure) for mode in MODES]
        for model in self.models:
            ours = [p for p in probes if p.model == model]
            for mode in MODES:
                self._publish(model, mode, [p for p in ours if p.mode == mode])
            if ours and all(p.judgement for p in ours):
                self.last_success.labels(model).set(time.time())
        return probes

    def _model_round(self, model: str) -> list[Probe]:
        client = self._client(model)
        try:
            if model not in self.record.models:
                logger.warning("%s: no known answers in %s: recording them now, each photo alone", model,
                               self.record.path)
                known, failures = record_answers(client, self.photos)
                if failures:  # no partial record: the next round records again
                    raise failures[0]
                self.record.models[model] = known
                self.record.save()
            probes = [self._ask(client, model, "alone", data) for data in self.photos]
            sizes = batch_sizes(served_configs(client.client, self.protocol, model))
        finally:
            client.close()
        for size in sizes:
            probes += self._together(model, size)
        return probes

    def _together(self, model: str, size: int) -> list[Probe]:
        """``size`` requests sent at once (each its own connection, released together), so the
        dynamic batcher can put them in one batch."""
        start = threading.Barrier(size)

        def send(i: int) -> Probe:
            # Made in the thread that uses it: the HTTP client's connections belong to their thread.
            try:
                client = self._client(model)
            except Exception as exc:
                start.abort()
                return Probe(model, "batched", None, str(as_request_failure(exc)))
            try:
                start.wait()
                return self._ask(client, model, "batched", self.photos[i % len(self.photos)])
            except RecordError:
                start.abort()
                raise
            except threading.BrokenBarrierError:
                return Probe(model, "batched", None, "another probe of the batch could not connect")
            finally:
                client.close()
        with concurrent.futures.ThreadPoolExecutor(size) as pool:
            return list(pool.map(send, range(size)))

    def _publish(self, model: str, mode: str, probes: list[Probe]) -> None:
        judged = [p.judgement for p in probes if p.judgement]
        wrong = sum(1 for j in judged if j.change)
        self.probes.labels(model, mode).inc(len(probes))
        self.errors.labels(model, mode).inc(len(probes) - len(judged))
        self.wrong.labels(model, mode).inc(wrong)
        if judged:
            self.agreement.labels(model, mode).set(1 - wrong / len(judged))
            self.worst.labels(model, mode).set(max(j.error for j in judged))
        elif probes:  # nothing answered: no agreement to speak of
            self.agreement.labels(model, mode).set(math.nan)
        for probe in probes:
            if probe.judgement and probe.judgement.change:
                logger.warning("%s (%s): wrong answer: %s", model, mode, probe.judgement.change)
        failure = next((p.error for p in probes if p.judgement is None), None)
        if failure:
            logger.warning("%s (%s): %d requests failed, the first: %s", model, mode, len(probes) - len(judged), failure)

    def _server_info(self) -> None:
        from harness.client import TritonClient

        with TritonClient(self.url, self.protocol, self.timeout) as client:
            version = client.server_metadata().get("version")
        if version:  # none: the probes say the server is gone
            self.server.info({"version": version})


# --- The command ---

def task_models() -> tuple[str, ...]:
    """Every task's pipelines this repository ships (``classify_dali`` ... ``segment_opencv``: each
    task's ensemble of each pipeline, :class:`harness.client.TaskModels`): what the watch probes
    by default, of those the server has ready."""
    from harness.client import PIPELINES
    from harness.task import BUILT_IN, get_task

    models = (get_task(name).repository for name in BUILT_IN)
    return tuple(dict.fromkeys(m.ensemble(pipeline) for m in models if m is not None for pipeline in PIPELINES))


def served_task_models(url: str, protocol: str, timeout: float) -> tuple[str, ...]:
    """:func:`task_models` that the server at ``url`` has ready (the default of ``--model``); all
    of them where it has none ready or cannot say (not up yet: the probes then report it)."""
    from harness.client import TritonClient

    with TritonClient(url, protocol, timeout) as client:
        ready = set(client.ready_models())
    return tuple(m for m in task_models() if m in ready) or task_models()


DEFAULT_MODELS = "every task's pipelines the server has ready"
"""What ``--model`` defaults to, in words (:func:`served_task_models`)."""
DEFAULT_LISTEN = "127.0.0.1:9108"
RECORD_FILE = "watch_answers.npz"
"""The watch's known answers, in its ``--known-answers`` directory."""


@dataclass(frozen=True)
class WatchOptions:
    protocol: str
    url: str
    models: tuple[str, ...]
    photos: dict[str, bytes]
    record: Path
    timeout: float
    interval: float = 60.0
    """Seconds from the start of a round to the start of the next."""
    once: bool = False
    listen: str = DEFAULT_LISTEN
    """``host:port`` the metrics are served on (not with ``once``)."""
    push_gateway: str | None = None
    """With ``once``: the Pushgateway the metrics are pushed to."""


EVERY_INTERFACE = ("0.0.0.0", "::", "")


def listen_address(listen: str) -> tuple[str, int]:
    """``--listen`` (``HOST:PORT``, ``[v6]:PORT``) -> (host, port), or :class:`UsageError` in one line."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535 or (not host and listen != f":{port}"):
        raise UsageError(f"--listen must be HOST:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:9108), got {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def serve_metrics(listen: str, registry):
    """The metrics' HTTP server on ``listen``; :class:`UsageError` when it cannot bind there (an
    unknown host, a port in use or not allowed); says on stderr when it serves every interface."""
    from prometheus_client import start_http_server

    host, port = listen_address(listen)
    try:
        http, _ = start_http_server(port, addr=host or "0.0.0.0", registry=registry)
    except OSError as exc:
        raise UsageError(f"--listen {listen}: cannot serve the metrics there ({exc.strerror or exc})") from None
    if host in EVERY_INTERFACE:
        logger.warning("--listen %s serves the metrics on every interface of this host: whoever reaches it can read "
                       "them (127.0.0.1:%d keeps them on this host)", listen, port)
    return http, host or "0.0.0.0", port


def summary(probes: list[Probe]) -> str:
    """The round as a Markdown table: per model and mode, the answers, their agreement with the
    known ones (the share that were; ``-`` where none was judged), the wrong ones, the failed
    requests and the worst change."""
    lines = ["| model | mode | probes | agreement | wrong answers | failed requests | worst change |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(p.model for p in probes):
        for mode in MODES:
            ours = [p for p in probes if p.model == model and p.mode == mode]
            judged = [p.judgement for p in ours if p.judgement]
            wrong = sum(1 for j in judged if j.change)
            worst = max((j.error for j in judged), default=math.nan)
            agreement = f"{1 - wrong / len(judged):.3g}" if judged else "-"
            lines.append(f"| {model} | {mode} | {len(ours)} | {agreement} | {wrong} | {len(ours) - len(judged)} | "
                         f"{worst:.4g} |")
    return "\n".join(lines)


def run(options: WatchOptions, stop: threading.Event | None = None) -> list[Probe]:
    """Rounds until ``stop`` is set (every ``interval`` seconds, the metrics served on
    ``listen``), or one round with ``once`` (pushed to ``push_gateway`` if given); returns the
    last round's probes."""
    from prometheus_client import CollectorRegistry, disable_created_metrics, pushadd_to_gateway

    disable_created_metrics()  # a counter's creation time is noise on every scrape
    registry, successes = CollectorRegistry(), CollectorRegistry()
    watch = Watch(options.protocol, options.url, list(options.models), options.photos, Record(options.record),
                  options.timeout, registry, successes if options.once else None)
    if options.once:
        probes = watch.round()
        if options.push_gateway:
            # Counters restart at each run (Prometheus' increase() takes resets); the last success
            # is pushed only when there is one (a POST replaces just what it carries).
            for pushed in (registry, successes):
                if any(family.samples for family in pushed.collect()):
                    pushadd_to_gateway(options.push_gateway, job="harness_watch", registry=pushed,
                                       timeout=options.timeout)
        return probes
    http, host, port = serve_metrics(options.listen, registry)
    logger.warning("serving the watch's metrics on http://%s:%d/metrics, a round every %g s", host, port,
                   options.interval)
    stop = stop or threading.Event()
    probes: list[Probe] = []
    try:
        while not stop.is_set():
            started = time.monotonic()
            probes = watch.round()
            stop.wait(max(0.0, options.interval - (time.monotonic() - started)))
    finally:
        http.shutdown()
    return probes
