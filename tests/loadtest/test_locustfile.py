"""loadtest/locustfile.py used as-is with Locust, headless, as a user runs it."""

import csv
import os
import subprocess
import sys

from loadtest.locust_control import LOCUSTFILE


def locust(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
                           "--loglevel", "WARNING", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_headless_grpc_run_reports_every_request(server, tmp_path):
    run = locust("-u", 2, "-r", 2, "-t", "4s", "--host", server.grpc_url, "--protocol", "grpc",
                 "--ensemble", "classify_dali", "--csv", tmp_path / "run")
    assert run.returncode == 0, run.stderr
    [row] = [r for r in read_csv(tmp_path / "run_stats.csv") if r["Name"] == "classify_dali"]
    assert row["Type"] == "grpc" and int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0
    assert float(row["Average Content Size"]) > 0  # the real response size is reported


def test_options_from_the_environment_and_bad_payloads_grouped_by_type(server, tmp_path):
    """HTTP, classify_opencv and 20% bad payloads, all set by environment variables."""
    env = {"LOCUST_HOST": server.http_url, "LOCUST_PROTOCOL": "http", "LOCUST_ENSEMBLE": "classify_opencv",
           "LOCUST_BAD_FRACTION": "0.2"}
    run = locust("-u", 2, "-r", 2, "-t", "4s", "--csv", tmp_path / "run", env=env)
    assert run.returncode == 1, run.stderr  # Locust's exit status when any request failed
    [row] = [r for r in read_csv(tmp_path / "run_stats.csv") if r["Name"] == "classify_opencv"]
    assert row["Type"] == "http"
    total, failed = int(row["Request Count"]), int(row["Failure Count"])
    failures = {r["Error"]: int(r["Occurrences"]) for r in read_csv(tmp_path / "run_failures.csv")}
    assert set(failures) == {"truncated JPEG", "not an image"} and sum(failures.values()) == failed
    assert abs(failed - total * 0.2) <= 2  # floor(n * 0.2) per user, 2 users
    assert abs(failures["truncated JPEG"] - failures["not an image"]) <= 2  # the kinds take turns

