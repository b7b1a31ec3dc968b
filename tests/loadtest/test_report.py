"""The sweep's reports, from given results: table, CSV, breakdown, plots."""

import csv

import matplotlib.image
import pytest

from loadtest.metrics import ModelBreakdown
from loadtest.report import BASELINE, CANDIDATE, breakdown_markdown, comparison_markdown, comparison_rows, write_report
from loadtest.stats import RunStats
from loadtest.sweep import Point, PointResult


def result(protocol, ensemble, clients, qps, errors=None, wrong=0, verified=True):
    stats = RunStats(seconds=10.0, requests=int(qps * 10), qps=qps, avg_ms=20.0, p50_ms=18.0, p90_ms=30.0,
                     p99_ms=45.0, max_ms=60.0, avg_response_bytes=230.0, errors=errors or {},
                     payloads={"photo": int(qps * 10)}, wrong_answers=wrong, verified=int(qps * 10) if verified else 0)
    models = [ensemble, "preprocess_" + ensemble.split("_")[1], "classifier"]
    parts = tuple(ModelBreakdown(m, int(qps * 10), 0, batch, 900.0, 10.0, 50.0, 700.0, 20.0)
                  for m, batch in zip(models, (1.0, 1.25, clients * 0.75)))
    return PointResult(Point(protocol, ensemble, clients), stats, parts)


@pytest.fixture
def results():
    return [result("grpc", CANDIDATE, 1, 90.0), result("grpc", BASELINE, 1, 70.0),
            result("grpc", CANDIDATE, 5, 321.0, {"wrong answer": 40}, wrong=40),
            result("grpc", BASELINE, 5, 276.0, {"truncated JPEG": 3}),
            result("http", CANDIDATE, 1, 80.0, verified=False)]  # no baseline at this point


def test_improvement_of_dali_over_opencv_at_equal_protocol_and_clients(results):
    improvement = {(r.protocol, r.ensemble, r.clients): r.qps_improvement for r in comparison_rows(results)}
    assert improvement[("grpc", CANDIDATE, 1)] == pytest.approx(90 / 70 - 1)
    assert improvement[("grpc", CANDIDATE, 5)] == pytest.approx(321 / 276 - 1)
    assert improvement[("grpc", BASELINE, 1)] is None and improvement[("http", CANDIDATE, 1)] is None


def test_markdown_table(results):
    lines = comparison_markdown(results).splitlines()
    assert lines[0].startswith("| protocol | ensemble | clients | QPS | avg ms | TP50 ms | TP90 ms | TP99 ms | errors")
    assert len(lines) == 2 + len(results)
    assert "| grpc | classify_dali | 1 | 90.0 | 20.0 | 18.0 | 30.0 | 45.0 | 0 | 0 of 900 | 1.25 | +28.6% |" in lines
    # The largest batch of the models the ensemble runs (the classifier's at 5 clients: 3.75).
    assert ("| grpc | classify_dali | 5 | 321.0 | 20.0 | 18.0 | 30.0 | 45.0 | 40 (wrong answer 40) | 40 of 3210 | 3.75 "
            "| +16.3% |") in lines
    assert ("| grpc | classify_opencv | 5 | 276.0 | 20.0 | 18.0 | 30.0 | 45.0 | 3 (truncated JPEG 3) | 0 of 2760 | 3.75 "
            "|  |") in lines
    assert "| http | classify_dali | 1 | 80.0 | 20.0 | 18.0 | 30.0 | 45.0 | 0 | not verified | 1.25 |  |" in lines
    assert len(breakdown_markdown(results).splitlines()) == 2 + 3 * len(results)


def test_every_report_file(results, tmp_path):
    paths = write_report(results, tmp_path / "out", {"date": "2026-11-21"})
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    by_name = {p.name: p for p in paths}
    with by_name["comparison.csv"].open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["protocol"], r["ensemble"], int(r["clients"])) for r in rows] == \
        [(r.point.protocol, r.point.ensemble, r.point.clients) for r in results]
    assert float(rows[0]["qps_improvement_pct"]) == pytest.approx(100 * (90 / 70 - 1), abs=0.01)
    assert rows[3]["errors"] == "3" and rows[3]["errors_by_type"] == '{"truncated JPEG": 3}'
    assert (rows[2]["wrong_answers"], rows[2]["verified"], rows[2]["avg_batch"]) == ("40", "3210", "3.750")
    with by_name["breakdown.csv"].open() as f:
        assert len(list(csv.DictReader(f))) == 3 * len(results)
    for name in ("throughput.png", "latency.png"):
        image = matplotlib.image.imread(by_name[name])
        assert image.shape[0] > 300 and image.shape[1] > 600  # two panels: grpc and http


def test_the_sweeps_exit_status_is_the_harness_policy(results):
    import dataclasses

    from harness.errors import NothingCompared, exit_status_of
    from loadtest.sweep import SweepResult

    def failing(r, **change):
        return dataclasses.replace(r, stats=dataclasses.replace(r.stats, **change))

    wrong = SweepResult(results, [], {})
    assert wrong.exit_status() == 1 and wrong.findings() == [
        "grpc classify_dali x5: [bold red]40 wrong answers of 3210 verified (errors: wrong answer 40)[/]"]
    results = [r for r in results if not r.stats.wrong_answers]
    assert SweepResult(results, [], {}).exit_status() == 0 and not SweepResult(results, [], {}).findings()
    unverified = SweepResult([failing(results[0], unverified=7), *results[1:]], [], {})
    assert unverified.exit_status() == 1 and "7 answers not verified" in unverified.findings()[0]
    photo_failed = SweepResult([failing(results[0], failed_photos=2), *results[1:]], [], {})
    assert photo_failed.exit_status() == 1 and "2 good photos failed" in photo_failed.findings()[0]
    none_served = SweepResult([failing(results[0], requests=0), *results[1:]], [], {})
    assert none_served.exit_status() == 1 and "no successful request" in none_served.findings()[0]
    with pytest.raises(NothingCompared, match="nothing was measured") as nothing:
        SweepResult([failing(r, requests=0) for r in results], [], {}).exit_status()
    assert exit_status_of(nothing.value) == 2


def test_the_loadtests_own_errors_exit_with_status_2():
    from harness.errors import ERROR_STATUS, exit_status_of
    from loadtest.locust_control import LocustError
    from loadtest.metrics import MetricsError
    from loadtest.triton import ServerNotReady

    for error in (LocustError, MetricsError, ServerNotReady):
        assert issubclass(error, RuntimeError) and exit_status_of(error("x")) == ERROR_STATUS
