"""The cpu profile against what this machine's cores can do, measured in one run on the
same real photos (issue: serve at the CPU's limit).

- the parts alone: image validation, decode + resize (the whole DALI-CPU preprocessing
  graph), the model (ONNX Runtime, EfficientNet-Lite0) at batch 1 and at its best batch;
- the combined bound: preprocessing and model back to back on the same cores,
  1 / (1/preprocessing + 1/model);
- the same pipeline in-process, one image per call, at 1, 2 and 4 clients: validate, DALI,
  ONNX Runtime (what ``classify_dali`` does), and without validation;
- ``classify_dali`` served over gRPC at 1, 2 and 4 clients (in rounds alternating with the
  in-process runs, so that drift on a shared machine hits both alike), with the cores it
  kept busy and the CPU time it spent per image in each process (server, each model's
  Python-backend stub, the benchmark's own client), against the in-process pipeline's;
- served / in-process and served / bound, ending with the two summary lines
  ``served/in-process at 2 clients: X`` and ``served/bound at 4 clients: Y`` (in-process:
  the same work as the served pipeline, validation included).

    .venv/bin/python benchmarks/roofline.py [--seconds 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import psutil
from timing import measure, server_cpu_seconds

from harness.client import TritonClient
from harness.corpus import list_images
from harness.model import INPUT_NAME, ONNX_FILENAME, onnx_session
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.preprocessing.image_check import validate
from harness.repository import CONFIG_FILENAME, load_config
from harness.session import embedded_server
from harness.spec import SPEC_FILENAME, load_spec

BATCHES = (1, 2, 4, 8, 16, 32)
CLIENTS = (1, 2, 4)
CLIENT = "client (this benchmark)"
IN_PROCESS_BARE = "in-process preprocess + model"
IN_PROCESS = "in-process validate + preprocess + model"
SERVED = "served classify_dali (gRPC)"


def cpu_seconds(server: psutil.Process) -> Counter:
    """CPU seconds so far of the server, each of its stubs (summed by model) and this process."""
    times = psutil.Process().cpu_times()
    return server_cpu_seconds(server) + Counter({CLIENT: times.user + times.system})


@dataclass(frozen=True)
class Measured:
    rate: float
    """Calls per second."""
    busy: float
    """Cores kept busy (CPU seconds per second) by the processes counted."""
    per_image: Counter
    """CPU milliseconds per call, by process."""


def measure_cpu(workers: Sequence[Callable], items: Sequence, seconds: float,
                server: psutil.Process | None = None) -> Measured:
    """:func:`timing.measure` with the CPU time it cost: this process's and, given
    ``server``, the server's and its stubs'."""
    def now() -> Counter:
        return cpu_seconds(server) if server else Counter({CLIENT: time.process_time()})

    before, start = now(), time.perf_counter()
    rate = measure(workers, items, seconds)
    elapsed, after = time.perf_counter() - start, now()
    spent = Counter({name: after[name] - before[name] for name in after})
    per_image = Counter({name: 1000 * s / (rate * elapsed) for name, s in spent.items() if s > 0.005 * elapsed})
    return Measured(rate, sum(spent.values()) / elapsed, per_image)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="in-process and served alternate in this many rounds (default: %(default)s)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    spec = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME).preprocess
    # The validation classify_dali's first step does, as production configures it.
    validation = load_config(DEFAULT_REPOSITORY / "validate_image" / CONFIG_FILENAME).parameters["validation"].string_value
    onnx = DEFAULT_REPOSITORY / "classifier" / ONNX_FILENAME
    images = [np.frombuffer(p.read_bytes(), np.uint8) for p in list_images(DEFAULT_PHOTOS)]

    def report(name: str, value: float, extra: str = "") -> float:
        print(f"{name:<52} {value:8.1f} img/s{extra}", flush=True)
        return value

    def cpu_line(per_image: Counter) -> str:
        parts = ", ".join(f"{name} {ms:.2f}" for name, ms in per_image.most_common())
        return f"    CPU ms per image {sum(per_image.values()):.2f}: {parts}"

    validated = report(f"validation '{validation}' (1 thread)", measure([lambda d: validate(d, validation, spec.resize)], images,
                                                            args.seconds / 2))
    # Preprocessing alone: DALI's own thread pool on every core, batches of 8 images.
    runner = CpuPipelineRunner(spec, max_batch_size=8, num_threads=cores)
    batches = [images[i:i + 8] for i in range(0, len(images) - 7, 8)]
    preprocess = report(f"decode + resize (DALI CPU, {cores} threads)", 8 * measure([runner.run], batches, args.seconds))
    inputs = np.stack([r.outputs[0] for r in runner.run(images[:32])])

    # The model alone: ONNX Runtime with one intra-op thread per core.
    session = onnx_session(onnx, threads=cores)
    per_batch = {}
    for batch in BATCHES:
        x = np.ascontiguousarray(np.resize(inputs, (batch, *inputs.shape[1:])))
        per_batch[batch] = batch * measure([lambda _, x=x: session.run(["logits"], {INPUT_NAME: x})], [0], args.seconds / 2)
    report("model, batch 1 (ONNX Runtime)", per_batch[1])
    best = max(per_batch, key=per_batch.get)
    model_best = report(f"model, best batch ({best})", per_batch[best])
    bound = report("combined bound (back to back, same cores)", 1 / (1 / preprocess + 1 / model_best))
    report("  the same with validation (1 thread)", 1 / (1 / validated + 1 / preprocess + 1 / model_best))

    # The pipeline in-process: each client its own single-threaded DALI and ONNX Runtime.
    def in_process(validated: bool) -> Callable[[], Callable]:
        def worker():
            dali = CpuPipelineRunner(spec, max_batch_size=1, num_threads=1)
            model = onnx_session(onnx, threads=1)

            def classify(data: bytes):
                if validated:
                    validate(data, validation, spec.resize)
                model_input = dali.run([np.frombuffer(data, np.uint8)])[0].outputs[0]
                return model.run(["logits"], {INPUT_NAME: model_input[None]})
            return classify
        return worker

    raw = [data.tobytes() for data in images]
    rates: dict[tuple[str, int], float] = {}
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        process = psutil.Process(server.process.pid)
        clients: list[TritonClient] = []

        def served() -> Callable:
            clients.append(TritonClient(server.url("grpc"), "grpc"))
            return lambda data, client=clients[-1]: client.logits([data], "dali")

        sides = {IN_PROCESS_BARE: in_process(False), IN_PROCESS: in_process(True), SERVED: served}
        for c in CLIENTS:
            workers = {side: [make() for _ in range(c)] for side, make in sides.items()}
            for side_workers in workers.values():  # warm-up: every pipeline, every server instance
                measure(side_workers, raw[:8], 1.0)
            # Alternate the sides in rounds, so that drift on a shared machine hits all alike.
            runs = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, side_workers in workers.items():
                    runs[side].append(measure_cpu(side_workers, raw, args.seconds / args.rounds,
                                                  process if side == SERVED else None))
            for side, measured in runs.items():
                rate = rates[side, c] = float(np.mean([m.rate for m in measured]))
                busy = float(np.mean([m.busy for m in measured]))
                report(f"{side}, {c} client(s)", rate, f"  ({busy:.2f} cores busy)")
                if side != IN_PROCESS_BARE:
                    print(cpu_line(measured[-1].per_image))
            for client in clients:
                client.close()
            clients.clear()

    print()
    for c in CLIENTS:
        print(f"{c} client(s): served/in-process {rates[SERVED, c] / rates[IN_PROCESS, c]:.2f} "
              f"(without validation {rates[SERVED, c] / rates[IN_PROCESS_BARE, c]:.2f}), "
              f"served/bound {rates[SERVED, c] / bound:.2f}")
    print(f"served/in-process at 2 clients: {rates[SERVED, 2] / rates[IN_PROCESS, 2]:.2f}")
    print(f"served/bound at 4 clients: {rates[SERVED, 4] / bound:.2f}")


if __name__ == "__main__":
    main()
