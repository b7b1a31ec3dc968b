"""Real short sweeps against the embedded server, run as a user runs them (a subprocess).

A few seconds per point: 1 and 2 clients, both ensembles, both protocols.
"""

import csv
import itertools
import json
import subprocess
import sys

import matplotlib.image
import pytest

from loadtest.locust_control import LocalLocust
from loadtest.report import CANDIDATE

ENSEMBLES = ("classify_dali", "classify_opencv")
SHORT = ["--warmup", "0.5", "--duration", "2"]
"""A point's warm-up and measured seconds: the checks hold on any number of requests, as long as
each user sends a few (a bad fraction of 0.25 needs 4 for its first bad payload); both cores are busy
all along, so every second cut is CPU the suite saves."""


def sweep(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "loadtest.sweep", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def against(server):
    return ["--url", server.http_url, "--protocol", "http", "--grpc-port", str(server.grpc_port),
            "--metrics-url", server.metrics_url]


@pytest.fixture(scope="module")
def full_sweep(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    run = sweep(*against(server), "--clients", 1, 2, *SHORT, "--report", out)
    assert run.returncode == 0, run.stderr
    return run, out, json.loads((out / "results.json").read_text())


def test_every_point_has_qps_and_ordered_percentiles(full_sweep):
    _, _, results = full_sweep
    points = {(p["protocol"], p["ensemble"], p["clients"]): p for p in results["points"]}
    assert set(points) == set(itertools.product(("grpc", "http"), ENSEMBLES, (1, 2)))
    for key, point in points.items():
        s = point["stats"]
        assert s["requests"] > 0 and s["qps"] > 0, key
        assert s["qps"] == pytest.approx(s["requests"] / s["seconds"])
        assert 0 < s["p50_ms"] <= s["p90_ms"] <= s["p99_ms"] <= s["max_ms"], key
        assert s["errors"] == {} and s["payloads"] == {"photo": s["requests"]} and s["failed_photos"] == 0, key
        assert s["avg_response_bytes"] > 0  # top-5 labels came back
        assert s["verified"] == s["requests"] and s["wrong_answers"] == 0, key  # each answer its photo's alone


def test_server_side_breakdown_matches_the_clients(full_sweep):
    _, _, results = full_sweep
    for point in results["points"]:
        ensemble = point["ensemble"]
        preprocess = "preprocess_" + ensemble.removeprefix("classify_")
        validate = ["validate_image"] if ensemble == "classify_dali" else []  # keeps bad images out of DALI batches
        parts = {b["model"]: b for b in point["breakdown"]}
        assert list(parts) == [ensemble, *validate, preprocess, "classifier"]
        served, seen = parts[ensemble]["requests"], point["stats"]["requests"]
        # Metrics are scraped inside the client's window: the two counts differ by at most
        # the requests in flight at its two ends.
        assert abs(served - seen) <= 2 * point["clients"] + 2, (served, seen)
        for b in parts.values():
            assert b["requests"] > 0 and b["failures"] == 0
            # avg_batch is an inferences / executions ratio of counters scraped inside the
            # client's window: a batch straddling an edge can pull it a hair below 1.
            assert b["compute_infer_us"] > 0 and b["queue_us"] >= 0 and b["avg_batch"] >= 0.95


def test_table_csv_and_plots(full_sweep):
    run, out, results = full_sweep
    table = (out / "comparison.md").read_text()
    assert table.strip() in run.stdout  # printed too
    assert len(table.strip().splitlines()) == 2 + 8
    with (out / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    qps = {(r["protocol"], r["ensemble"], r["clients"]): float(r["qps"]) for r in rows}
    for r in rows:
        if r["ensemble"] == CANDIDATE:
            expected = 100 * (qps[(r["protocol"], r["ensemble"], r["clients"])] /
                              qps[(r["protocol"], "classify_opencv", r["clients"])] - 1)
            assert float(r["qps_improvement_pct"]) == pytest.approx(expected, abs=0.01)
        else:
            assert r["qps_improvement_pct"] == ""
    with (out / "breakdown.csv").open() as f:
        # 8 points x (ensemble, preprocessing, classifier), + validate_image on the 4 DALI points
        assert len(list(csv.DictReader(f))) == 8 * 3 + 4
    for name in ("throughput.png", "latency.png"):
        assert matplotlib.image.imread(out / name).shape[1] > 600
    assert results["config"]["clients"] == [1, 2] and results["server"]["embedded_cpu_profile"] is False


def test_bad_payloads_are_errors_by_type_and_nothing_else(server, tmp_path):
    run = sweep(*against(server), "--protocols", "grpc", "--clients", 2, "--bad-fraction", 0.25, *SHORT,
                "--out", tmp_path)
    assert run.returncode == 0, run.stderr  # bad payloads failing is expected, not a failed sweep
    for point in json.loads((tmp_path / "results.json").read_text())["points"]:
        s = point["stats"]
        payloads = s["payloads"]
        assert s["errors"] == {"truncated JPEG": payloads["truncated"], "not an image": payloads["not_an_image"]}
        assert s["requests"] == payloads["photo"] > 0 and s["failed_photos"] == 0  # the good ones still served
        total = sum(payloads.values())
        # Each user sends exactly floor(n / 4) bad payloads of its n requests.
        assert abs((total - payloads["photo"]) / total - 0.25) <= 2 / total + 1e-9, payloads
        ensemble = {b["model"]: b for b in point["breakdown"]}[point["ensemble"]]
        # The server saw the failures too (Triton 2.51 counts each failed ensemble request
        # twice), and its per-request figures are of the successful requests only.
        assert ensemble["failures"] >= sum(s["errors"].values()) - 2 * point["clients"]
        assert abs(ensemble["requests"] - s["requests"]) <= 2 * point["clients"] + 2
    assert "truncated JPEG" in (tmp_path / "comparison.md").read_text()


def test_locust_distributed_mode_master_and_worker(server, tmp_path):
    run = sweep(*against(server), "--locust-workers", 1, "--protocols", "grpc", "--model", "classify_dali",
                "--clients", 2, *SHORT, "--report", tmp_path)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["load_generator"] == "local Locust, master + 1 workers"
    stats = results["points"][0]["stats"]
    # The master recorded the known answers and sent them to its worker: every answer judged.
    assert stats["requests"] > 0 and stats["verified"] == stats["requests"] and stats["wrong_answers"] == 0
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {"locust-master.log", "locust-worker-1.log"}


def test_drives_a_running_locust_master_as_in_docker_compose(server, photos_dir, tmp_path):
    with LocalLocust({"images": photos_dir}, workers=1, log_dir=tmp_path / "locust") as master:
        run = sweep(*against(server), "--locust", master.base_url, "--protocols", "http", "--model",
                    "classify_opencv", "--clients", 1, 2, *SHORT, "--report", tmp_path / "out")
        again = sweep(*against(server), "--locust", master.base_url, "--protocols", "http", "--model",
                      "classify_opencv", "--clients", 1, "--warmup", "0", "--duration", "1", "--report", tmp_path / "again")
    assert run.returncode == 0, run.stderr
    assert again.returncode == 0, again.stderr
    # The long-lived master records once per sweep (its two points share it), not once per process:
    # the server may have been redeployed between two sweeps.
    log = (tmp_path / "locust" / "locust-master.log").read_text()
    assert log.count("recording the known answers of classify_opencv") == 2, log
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["load_generator"] == f"Locust at {master.base_url} (1 workers)"
    assert results["points"][0]["stats"]["requests"] > 0
    assert not (tmp_path / "out" / "logs").exists()  # no Locust of its own was started


@pytest.mark.server  # starts its own tritonserver
def test_without_url_it_serves_the_cpu_profile_itself_and_a_point_can_end_on_a_request_count(tmp_path):
    run = subprocess.run([sys.executable, "-m", "harness", "loadtest", "--protocols", "http", "--model",
                          "classify_opencv", "--clients", "1", "--warmup", "0.5", "--duration", "30", "--requests",
                          "15", "--report", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "embedded Triton server ready" in run.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["server"]["embedded_cpu_profile"] is True
    stats = results["points"][0]["stats"]
    assert stats["requests"] >= 15 and stats["seconds"] < 15  # ended on the count, long before 30 s


def test_refuses_an_unreachable_or_not_ready_server_before_starting(server, tmp_path):
    unreachable = sweep("--url", "127.0.0.1:9", "--protocol", "http", "--report", tmp_path)
    assert unreachable.returncode == 2 and "is not reachable" in unreachable.stderr
    missing = sweep(*against(server), "--model", "classify_missing", "--report", tmp_path)
    assert missing.returncode == 2 and "'classify_missing' is not ready" in missing.stderr
    no_locust = sweep(*against(server), "--locust", "http://127.0.0.1:9", "--report", tmp_path)
    assert no_locust.returncode == 2 and "Locust at http://127.0.0.1:9 is not reachable" in no_locust.stderr
    bad = sweep(*against(server), "--bad-fraction", "1.5", "--report", tmp_path)
    assert bad.returncode == 2 and "--bad-fraction" in bad.stderr
    assert not any(tmp_path.iterdir())  # nothing was run, nothing written
