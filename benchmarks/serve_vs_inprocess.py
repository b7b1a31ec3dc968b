"""Throughput of the cpu profile served by Triton vs the same pipeline run in-process.

Both sides run DALI (CPU decoder) preprocessing and then the EfficientNet-Lite0 ONNX in
ONNX Runtime, on the real photo corpus, one image per request/call, with 1 and 2
concurrent clients. Printed: images/s of each side and served / in-process, measured
in this one run (target: served >= 0.7x in-process).

    .venv/bin/python benchmarks/serve_vs_inprocess.py [--seconds 10] [--protocol grpc]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import measure

from harness.client import TritonClient
from harness.corpus import list_images
from harness.model import onnx_session
from harness.paths import DEFAULT_PHOTOS
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.session import Session, embedded_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="per side and client count (default: %(default)s)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default: %(default)s)")
    args = parser.parse_args()

    setup = Session()  # the repository's own spec and model, as the commands read them
    spec = setup.spec.preprocess
    images = [p.read_bytes() for p in list_images(DEFAULT_PHOTOS)]
    session = onnx_session(setup.onnx_path)

    def in_process_worker():
        runner = CpuPipelineRunner(spec, max_batch_size=1, num_threads=1)

        def classify(data: bytes):
            x = runner.run([np.frombuffer(data, np.uint8)])[0].outputs[0]
            return session.run(["logits"], {"input": x[None]})[0]

        return classify

    rows = []
    with embedded_server(setup.repository) as server:
        def served_worker():
            client = TritonClient(server.url(args.protocol), args.protocol)
            return lambda data: client.logits([data], "dali")

        for clients in args.clients:
            sides = {"local": [in_process_worker() for _ in range(clients)],
                     "served": [served_worker() for _ in range(clients)]}
            for workers in sides.values():  # warm-up, not timed: every server instance and pipeline
                for w in workers:
                    for data in images[:4]:
                        w(data)
            # Alternate the two sides in rounds, so drift in a noisy machine hits both alike.
            rates = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, workers in sides.items():
                    rates[side].append(measure(workers, images, args.seconds / args.rounds))
            rows.append((clients, sum(rates["local"]) / args.rounds, sum(rates["served"]) / args.rounds))

    print(f"\n{len(images)} real photos, DALI CPU preprocessing + EfficientNet-Lite0 (ONNX Runtime), {args.protocol}")
    print(f"{'clients':>8} {'in-process img/s':>17} {'served img/s':>13} {'served/in-process':>18}")
    for clients, local, served in rows:
        print(f"{clients:>8} {local:>17.1f} {served:>13.1f} {served / local:>17.2f}x")


if __name__ == "__main__":
    main()
