"""Throughput measurement shared by the benchmarks (run as scripts: benchmarks/ is on sys.path)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Callable, Sequence

import psutil


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


def process_name(process: psutil.Process) -> str:
    """``tritonserver``, or the model a Python-backend stub serves (``.../<model>/1/model.py``)."""
    cmdline = process.cmdline()
    for arg in cmdline:
        if arg.endswith("/model.py"):
            return arg.split("/")[-3]
    return os.path.basename(cmdline[0]) if cmdline else process.name()


def server_cpu_seconds(server: psutil.Process) -> Counter:
    """CPU seconds so far of a server and each of its stubs, summed by :func:`process_name`
    (a stub that exits meanwhile is left out)."""
    seconds = Counter()
    for process in (server, *server.children(recursive=True)):
        try:
            times = process.cpu_times()
            seconds[process_name(process)] += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return seconds
