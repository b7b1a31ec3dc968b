"""Overload: a burst of concurrent requests against the cpu profile, with and without a queue
policy on the dynamic batchers. Chooses the policy the repository ships (docs/robustness.md).

For each policy (none: unbounded queues, as before; then ``max_queue_size`` values, all with
``timeout_action: REJECT``), one real embedded server (cpu profile, the policy written into
every dynamic batcher) gets ``--burst`` requests of one corpus photo at once (gRPC, async),
then one request alone. Prints per policy: answered and refused counts, the latency of the
answered (p50, p99) and of the refused (p50, max), the lone request's latency after the burst,
and the server's memory (the process tree's RSS) before and after.

    .venv/bin/python benchmarks/overload.py [--burst 1000] [--ensemble classify_dali] [--sizes 0 16 64 256]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY  # noqa: E402
from harness.repository import CONFIG_FILENAME, build_cpu_profile, load_config, save_config  # noqa: E402
from harness.server import TritonServer, free_port  # noqa: E402


def with_queue_policy(repository: Path, max_queue_size: int, timeout_us: int) -> None:
    """Every dynamic batcher of ``repository``: queue at most ``max_queue_size`` requests (0:
    no policy), refusing beyond it, and refuse a request queued longer than ``timeout_us``."""
    for path in sorted(repository.glob(f"*/{CONFIG_FILENAME}")):
        config = load_config(path)
        if not config.HasField("dynamic_batching"):
            continue
        config.dynamic_batching.ClearField("default_queue_policy")
        if max_queue_size:
            policy = config.dynamic_batching.default_queue_policy
            policy.max_queue_size = max_queue_size
            policy.timeout_action = policy.REJECT
            policy.default_timeout_microseconds = timeout_us
            policy.allow_timeout_override = True
        save_config(config, path)


def tree_rss_mib(pid: int) -> float:
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2 ** 20


def burst(url: str, ensemble: str, image: bytes, count: int) -> tuple[list[float], list[float], dict[str, int]]:
    """``count`` requests at once; (answered latencies, refused latencies, refusal reasons)."""
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    data = np.frombuffer(image, np.uint8)[None]
    answered, refused, reasons, lock, done = [], [], {}, threading.Lock(), threading.Event()
    started: dict[int, float] = {}

    def callback(i, result, error):
        seconds = time.perf_counter() - started[i]
        with lock:
            if error is None:
                answered.append(seconds)
            else:
                refused.append(seconds)
                key = re.sub(r"^in ensemble '[^']*', |\[request id: [^\]]*\] ", "", str(error.message()))[:50]
                reasons[key] = reasons.get(key, 0) + 1
            if len(answered) + len(refused) == count:
                done.set()

    for i in range(count):
        tensor = grpc.InferInput("IMAGE", list(data.shape), "UINT8")
        tensor.set_data_from_numpy(data)
        started[i] = time.perf_counter()
        client.async_infer(ensemble, [tensor], lambda result, error, i=i: callback(i, result, error),
                           outputs=[grpc.InferRequestedOutput("PROBABILITIES", class_count=1)], client_timeout=120)
    done.wait(300)
    client.close()
    return answered, refused, reasons


def lone_request(url: str, ensemble: str, image: bytes) -> float:
    from harness.client import TritonClient

    with TritonClient(url, "grpc", timeout=60) as client:
        start = time.perf_counter()
        client.classify([image], ensemble.removeprefix("classify_"))
        return time.perf_counter() - start


def pct(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q) * 1000:7.0f}" if values else "      -"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--ensemble", default="classify_dali")
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 16, 64, 256],
                        help="max_queue_size values (0: no queue policy, the old configs)")
    parser.add_argument("--timeout-ms", type=int, default=5000, help="default_timeout_microseconds / 1000")
    parser.add_argument("--photo", default="squirrel_cls.jpg")
    args = parser.parse_args()
    image = (DEFAULT_PHOTOS / args.photo).read_bytes()
    print(f"{args.burst} concurrent {args.ensemble} requests of {args.photo} ({len(image) // 1024} KiB), "
          f"cpu profile, queue timeout {args.timeout_ms} ms")
    print(f"{'max_queue_size':>14} {'answered':>8} {'refused':>7} {'ok p50 ms':>9} {'ok p99 ms':>9} "
          f"{'refused p50':>11} {'refused max':>11} {'lone after':>10} {'RSS MiB before/after':>21}  reasons")
    BUILD_DIR.mkdir(exist_ok=True)
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="overload-", dir=BUILD_DIR) as tmp:
            repo = build_cpu_profile(DEFAULT_REPOSITORY, Path(tmp) / "repository")
            with_queue_policy(repo, size, args.timeout_ms * 1000)
            server = TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                                  log_file=Path(tmp) / "tritonserver.log")
            with server:
                lone_request(server.grpc_url, args.ensemble, image)  # warm
                before = tree_rss_mib(server.process.pid)
                answered, refused, reasons = burst(server.grpc_url, args.ensemble, image, args.burst)
                lone = lone_request(server.grpc_url, args.ensemble, image)
                time.sleep(2)
                after = tree_rss_mib(server.process.pid)
            shutil.rmtree(tmp, ignore_errors=True)
        label = str(size) if size else "none"
        print(f"{label:>14} {len(answered):>8} {len(refused):>7} {pct(answered, 50):>9} {pct(answered, 99):>9} "
              f"{pct(refused, 50):>11} {pct(refused, 100):>11} {lone * 1000:>8.0f}ms {before:>9.0f} / {after:<9.0f}  "
              + "; ".join(f"{k} x{v}" for k, v in reasons.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
