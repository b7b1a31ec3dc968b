"""What judging every answer costs a load test: QPS with and without verification, in one run.

Against the embedded server (cpu profile), one local Locust: for each model and client count,
points with verification (the default) and with ``--no-verify`` alternate, ``--rounds`` times
each (ABAB..., so a drift of the machine falls on both alike), and the QPS ratio of the medians
is printed. Then the judging itself, timed in this process on real answers of each model: the
CPU it adds per request (it runs after the request's time is taken, so it is in no latency).
Target: verification costs at most 5% QPS.

    .venv/bin/python benchmarks/verify_cost.py [--clients 1 4] [--duration 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.session import embedded_server
from loadtest.answers import rule_for
from loadtest.locust_control import LocalLocust
from loadtest.payloads import list_photos
from loadtest.sweep import Point, SweepConfig, run_point
from loadtest.triton import Endpoints, ensemble_models

MODELS = ("classify_dali", "detect_dali")


def judge_microseconds(url: str, model: str, photos: list[bytes]) -> float:
    """The judging's CPU per answer (µs), on each photo's real answer judged against itself."""
    from loadtest.inference import TritonInferClient, record_answers

    client = TritonInferClient("grpc", url, 60.0, model)
    known, failures = record_answers(client, photos)
    client.close()
    assert not failures, failures
    start, count = time.process_time(), 0
    while time.process_time() - start < 2.0:
        for answer in known.answers.values():
            rule_for(answer)(answer, answer)
            count += 1
    return (time.process_time() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args()

    qps: dict[tuple[str, int, bool], list[float]] = {}
    with embedded_server(DEFAULT_REPOSITORY) as server:
        endpoints = Endpoints(server.http_url, server.grpc_url, server.metrics_url)
        with LocalLocust({"images": DEFAULT_PHOTOS}, log_dir=BUILD_DIR / "verify_cost") as locust:
            for model in args.models:
                steps = ensemble_models(endpoints, model)
                for clients in args.clients:
                    for _ in range(args.rounds):
                        for verify in (True, False):
                            config = SweepConfig(ensembles=(model,), clients=(clients,), protocols=("grpc",),
                                                 warmup=args.warmup, duration=args.duration, verify=verify)
                            result = run_point(locust, endpoints, Point("grpc", model, clients), config, steps,
                                               record_id="verify_cost")
                            assert result.stats.wrong_answers == 0 and bool(result.stats.verified) == verify, result
                            qps.setdefault((model, clients, verify), []).append(result.stats.qps)
                            print(f"{model} x{clients} {'verified' if verify else 'unverified'}: "
                                  f"{result.stats.qps:.1f} QPS ({result.stats.verified} verified)", flush=True)
        photos = [p.read_bytes() for p in list_photos(Path(DEFAULT_PHOTOS))[:12]]
        cost = {model: judge_microseconds(server.grpc_url, model, photos) for model in args.models}

    # The bound that does not depend on the machine's noise: the judging's CPU per second of load,
    # as a share of one core (Locust's users share one process, one core).
    print("\n| model | clients | QPS verified | QPS unverified | verified / unverified | judging µs/answer | "
          "judging's share of a core |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for model in args.models:
        for clients in args.clients:
            on, off = (statistics.median(qps[(model, clients, v)]) for v in (True, False))
            worst = max(worst, 1 - on / off)
            print(f"| {model} | {clients} | {on:.1f} | {off:.1f} | {on / off:.3f} | {cost[model]:.0f} | "
                  f"{cost[model] * on / 1e4:.2f}% |")
    print(f"\nlargest measured QPS cost of verification: {worst * 100:.1f}% (target: at most 5%; the medians of "
          f"{args.rounds} alternating rounds: below about 3% it is the machine's noise)")


if __name__ == "__main__":
    main()
