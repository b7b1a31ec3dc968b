"""Server-side breakdown of a run, from Triton's Prometheus metrics endpoint.

Triton's inference metrics are cumulative counters per model. Scraped just before and
just after a measurement window, their differences divided by the difference of
``nv_inference_request_success`` give per-request queue and compute times, and
inferences / executions gives the average batch size the dynamic batcher formed.

The ensemble's own row counts only successful requests. Observed on Triton 2.51 (the
embedded server): each failed ensemble request adds 2 to the ensemble's
``nv_inference_request_failure``, so ``failures`` there is twice the client's error count.
A caveat of the Python backend (the cpu profile's models and ``preprocess_opencv``): a
request it answers with an error response still counts as a success of *that model*
(the ensemble counts it as a failure), so with bad payloads the preprocessing model's
per-request times include the failed requests it decoded.
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass

from harness.errors import HarnessError

REQUEST_SUCCESS = "nv_inference_request_success"
REQUEST_FAILURE = "nv_inference_request_failure"
INFERENCE_COUNT = "nv_inference_count"
EXECUTION_COUNT = "nv_inference_exec_count"
DURATIONS = {
    "request_us": "nv_inference_request_duration_us",
    "queue_us": "nv_inference_queue_duration_us",
    "compute_input_us": "nv_inference_compute_input_duration_us",
    "compute_infer_us": "nv_inference_compute_infer_duration_us",
    "compute_output_us": "nv_inference_compute_output_duration_us",
}
COUNTERS = (REQUEST_SUCCESS, REQUEST_FAILURE, INFERENCE_COUNT, EXECUTION_COUNT, *DURATIONS.values())

_SAMPLE_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class MetricsError(HarnessError, RuntimeError):
    """The metrics endpoint could not be read or is not Triton's (exit status 2, :mod:`harness.errors`)."""


@dataclass(frozen=True)
class MetricsSnapshot:
    """The inference counters of every model at one moment: ``values[(metric, model)]``.

    Counters with more labels than the model (failures by reason, several versions) are
    summed per model.
    """

    values: dict[tuple[str, str], float]

    def get(self, metric: str, model: str) -> float:
        return self.values.get((metric, model), 0.0)

    @property
    def models(self) -> list[str]:
        return sorted({model for _, model in self.values})


def parse_metrics(text: str) -> MetricsSnapshot:
    """Read Triton's Prometheus text format, keeping the per-model inference counters."""
    values: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_LINE.match(line)
        if not match or match["name"] not in COUNTERS:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if "model" not in labels:
            continue
        key = (match["name"], labels["model"])
        values[key] = values.get(key, 0.0) + float(match["value"])
    return MetricsSnapshot(values)


def scrape(url: str, timeout: float = 10.0) -> MetricsSnapshot:
    """Read the metrics endpoint (``http://host:8002/metrics``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        raise MetricsError(f"cannot read Triton metrics at {url}: {exc}") from None
    snapshot = parse_metrics(text)
    if not snapshot.values:
        raise MetricsError(f"{url} has no Triton inference metrics (nv_inference_*): is it Triton's metrics port?")
    return snapshot


def scrape_settled(url: str, settle: float = 2.0, interval: float = 0.05) -> MetricsSnapshot:
    """:func:`scrape` once the counters stop moving (two reads ``interval`` apart agree), or
    after ``settle`` seconds. Triton records a request's statistics after it has sent the
    response, so a scrape made the moment the last answer arrives can miss it (seen on a
    loaded machine: 2 of 3 requests counted)."""
    snapshot, deadline = scrape(url), time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(interval)
        previous, snapshot = snapshot, scrape(url)
        if snapshot == previous:
            break
    return snapshot


@dataclass(frozen=True)
class ModelBreakdown:
    """Where one model's server time went during a window, per successful request."""

    model: str
    requests: int
    """Successful requests of this model in the window."""
    failures: int
    avg_batch: float
    """Inferences per execution: the batch size the dynamic batcher formed on average."""
    request_us: float
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelBreakdown":
        return cls(**d)


def breakdown(before: MetricsSnapshot, after: MetricsSnapshot, model: str) -> ModelBreakdown:
    """Per-request figures of ``model`` between two snapshots (NaN when it served nothing)."""

    def delta(metric: str) -> float:
        return after.get(metric, model) - before.get(metric, model)

    successes = delta(REQUEST_SUCCESS)
    executions = delta(EXECUTION_COUNT)
    per_request = {field: (delta(metric) / successes if successes else float("nan"))
                   for field, metric in DURATIONS.items()}
    return ModelBreakdown(
        model=model,
        requests=int(successes),
        failures=int(delta(REQUEST_FAILURE)),
        avg_batch=delta(INFERENCE_COUNT) / executions if executions else float("nan"),
        **per_request,
    )
