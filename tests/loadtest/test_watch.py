"""``harness watch``: known-answer probes against a live server, as Prometheus metrics.

Against the embedded server: one round records the known answers, the next agrees with them
over the other protocol. Against a deployment whose classifier answers wrongly inside a batch
(``tests.foreign``): the running watch's metrics, read by Prometheus' own text parser, show the
answers sent alone agreeing and those sent together not; when the server stops, the last
success stops moving and failed probes rise while the watch keeps serving its metrics."""

import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.server import free_port
from loadtest.watch import batch_sizes
from tests.commands import harness
from tests.foreign import ENSEMBLE, serve_batch_dependent


def test_one_round_records_the_known_answers_and_the_next_agrees(server, tmp_path):
    record = tmp_path / "known"
    first = harness("watch", "--url", server.grpc_url, "--once", "--known-answers", record, "--model", "classify_dali",
                    "--model", "detect_opencv", "--photo-count", 2)
    assert first.returncode == 0, first.stderr
    assert "recording them now" in first.stderr and (record / "watch_answers.npz").is_file()
    again = harness("watch", "--url", server.http_url, "--protocol", "http", "--once", "--known-answers", record,
                    "--model", "classify_dali", "--model", "detect_opencv", "--photo-count", 2)
    assert again.returncode == 0, again.stderr
    assert "recording" not in again.stderr
    rows = [line.split("|")[1:-1] for line in again.stdout.splitlines()[2:]]
    assert {(r[0].strip(), r[1].strip()) for r in rows} == {(m, mode) for m in ("classify_dali", "detect_opencv")
                                                           for mode in ("alone", "batched")}
    for model, mode, probes, agreement, wrong, failed, _ in rows:
        assert int(probes) >= 2 and float(agreement) == 1.0 and int(wrong) == 0 and int(failed) == 0, (model, mode)


def test_by_default_the_watch_probes_every_tasks_pipelines(server):
    """Without --model: every task's pipelines the server has ready (this repository serves them all)."""
    from loadtest.watch import served_task_models

    expected = {f"{task}_{pipeline}" for task in ("classify", "embed", "detect", "ocr", "segment")
                for pipeline in ("dali", "opencv")}
    assert set(served_task_models(server.grpc_url, "grpc", 30.0)) == expected


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """The watch's samples: (name, model, mode) -> value, as Prometheus parses them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, s.labels.get("model", ""), s.labels.get("mode", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(port: int, condition, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            samples = scrape(port)
            if condition(samples):
                return samples
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    raise AssertionError(f"the watch's metrics never met the condition: {samples if 'samples' in dir() else None}")


@pytest.mark.server  # starts its own tritonserver, and stops it
def test_the_running_watch_sees_a_batch_dependent_model_and_a_server_that_stops(repository, tmp_path):
    port = free_port()
    with serve_batch_dependent(tmp_path / "repository", repository / "classifier" / "model.onnx") as triton:
        watch = subprocess.Popen([sys.executable, "-m", "harness", "watch", "--url", triton.grpc_url, "--model", ENSEMBLE,
                                  "--known-answers", tmp_path / "known", "--interval", "1", "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            samples = wait_for(port, lambda s: s.get(("harness_watch_probes_total", ENSEMBLE, "batched"), 0) > 0)
            assert samples[("harness_watch_agreement", ENSEMBLE, "alone")] == 1.0
            assert samples[("harness_watch_agreement", ENSEMBLE, "batched")] < 1.0  # the fault acts inside a batch
            assert samples[("harness_watch_wrong_answers_total", ENSEMBLE, "batched")] > 0
            assert samples[("harness_watch_worst_error", ENSEMBLE, "batched")] == float("inf")  # top-1 changed
            assert samples[("harness_watch_server_info", "", "")] == 1.0
            last = samples[("harness_watch_last_success_timestamp_seconds", ENSEMBLE, "")]
            assert time.time() - 60 < last <= time.time()
            triton.stop()
            failed = samples[("harness_watch_probe_errors_total", ENSEMBLE, "alone")]
            later = wait_for(port, lambda s: s[("harness_watch_probe_errors_total", ENSEMBLE, "alone")] > failed)
            time.sleep(2.5)  # two more rounds
            stale = scrape(port)
            assert stale[("harness_watch_last_success_timestamp_seconds", ENSEMBLE, "")] == \
                later[("harness_watch_last_success_timestamp_seconds", ENSEMBLE, "")] <= time.time() - 2
            assert watch.poll() is None  # still watching
        finally:
            watch.terminate()
            out, err = watch.communicate(timeout=60)
    assert watch.returncode in (0, 1), err  # 1: its last round had failed requests
    assert "wrong answer" in err and "where the photo alone answers" in err


def test_batch_sizes_are_the_steps_dynamic_batchers():
    ensemble = {"max_batch_size": 8, "ensemble_scheduling": {"step": []}}
    batching = {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [2, 4]}}
    unbatched = {"max_batch_size": 0}
    huge = {"max_batch_size": 256, "dynamic_batching": {}}
    assert batch_sizes([ensemble, batching, unbatched]) == [2, 4, 8]
    assert batch_sizes([ensemble, unbatched]) == []  # nothing batches: only the alone probes
    assert batch_sizes([huge]) == [16]  # at most 16 requests at once


def test_once_pushes_to_a_pushgateway_and_the_last_success_only_after_one(server, tmp_path):
    """A CronJob's round: its metrics POSTed to the Pushgateway's job (here a loopback HTTP
    server that keeps what it is sent); a round against a server that is not there pushes
    the failures but no last success, so the gateway keeps the previous one."""
    import http.server
    import threading

    pushes = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            pushes.append((self.path, self.rfile.read(int(self.headers["Content-Length"])).decode()))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{gateway.server_address[1]}"
    try:
        ok = harness("watch", "--url", server.grpc_url, "--once", "--push-gateway", url, "--known-answers", tmp_path / "k",
                     "--model", "classify_opencv", "--photo-count", 1)
        assert ok.returncode == 0, ok.stderr
        names = [{f.name for f in text_string_to_metric_families(body)} for _, body in pushes]
        assert [path for path, _ in pushes] == ["/metrics/job/harness_watch"] * 2
        assert "harness_watch_agreement" in names[0] and names[1] == {"harness_watch_last_success_timestamp_seconds"}
        pushes.clear()
        gone = harness("watch", "--url", f"127.0.0.1:{free_port()}", "--once", "--push-gateway", url,
                       "--known-answers", tmp_path / "k", "--model", "classify_opencv", "--photo-count", 1, "--timeout", 5)
        assert gone.returncode == 2, gone.stderr  # nothing answered
        [(_, body)] = pushes
        samples = {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}
        assert samples["harness_watch_probe_errors_total"] > 0
        assert "harness_watch_last_success_timestamp_seconds" not in samples
    finally:
        gateway.shutdown()
