"""The cpu profile against what this machine's cores can do, measured in one run on the
same real photos (issue: serve at the CPU's limit).

- decode + resize (the whole DALI-CPU preprocessing graph) alone, img/s;
- the model alone (ONNX Runtime, EfficientNet-Lite0) at batch 1 and at its best batch;
- the combined bound: both back to back on the same cores, 1 / (1/preprocessing + 1/model);
- the same pipeline in-process (DALI then ONNX Runtime, one image per call) and served
  (``classify_dali`` over gRPC), at 1, 2 and 4 clients;
- served / in-process and served / bound, ending with the two summary lines
  ``served/in-process at 2 clients: X`` and ``served/bound at 4 clients: Y``.

    .venv/bin/python benchmarks/roofline.py [--seconds 8]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from timing import measure

from harness.client import TritonClient
from harness.corpus import list_images
from harness.model import INPUT_NAME, ONNX_FILENAME, onnx_session
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.session import embedded_server
from harness.spec import SPEC_FILENAME, load_spec

BATCHES = (1, 2, 4, 8, 16, 32)
CLIENTS = (1, 2, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement (default: %(default)s)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    spec = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME).preprocess
    onnx = DEFAULT_REPOSITORY / "classifier" / ONNX_FILENAME
    images = [np.frombuffer(p.read_bytes(), np.uint8) for p in list_images(DEFAULT_PHOTOS)]

    def report(name: str, value: float) -> float:
        print(f"{name:<44} {value:8.1f} img/s", flush=True)
        return value

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

    # The pipeline in-process: each client its own single-threaded DALI and ONNX Runtime.
    def in_process_worker():
        dali = CpuPipelineRunner(spec, max_batch_size=1, num_threads=1)
        model = onnx_session(onnx, threads=1)
        return lambda data: model.run(["logits"], {INPUT_NAME: dali.run([data])[0].outputs[0][None]})

    local = {c: report(f"in-process pipeline, {c} client(s)", measure([in_process_worker() for _ in range(c)], images,
                                                                       args.seconds)) for c in CLIENTS}
    served = {}
    raw = [data.tobytes() for data in images]
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        for c in CLIENTS:
            clients = [TritonClient(server.url("grpc"), "grpc") for _ in range(c)]
            workers = [lambda data, cl=cl: cl.logits([data], "dali") for cl in clients]
            measure(workers, raw[:8], 1.0)  # warm-up: every instance of every model
            served[c] = report(f"served classify_dali (gRPC), {c} client(s)", measure(workers, raw, args.seconds))
            for cl in clients:
                cl.close()

    print()
    for c in CLIENTS:
        print(f"{c} client(s): served/in-process {served[c] / local[c]:.2f}, served/bound {served[c] / bound:.2f}")
    print(f"served/in-process at 2 clients: {served[2] / local[2]:.2f}")
    print(f"served/bound at 4 clients: {served[4] / bound:.2f}")


if __name__ == "__main__":
    main()
