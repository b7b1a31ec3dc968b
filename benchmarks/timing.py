"""Throughput measurement shared by the benchmarks (run as scripts: benchmarks/ is on sys.path)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence


def measure(workers: Sequence[Callable], items: Sequence, seconds: float) -> float:
    """Calls/s of one thread per worker, each calling it on the items in turn for ``seconds``."""
    clients = len(workers)
    counts = [0] * clients
    stop = threading.Event()

    def loop(k: int) -> None:
        i = k
        while not stop.is_set():
            workers[k](items[i % len(items)])
            counts[k] += 1
            i += clients

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)
