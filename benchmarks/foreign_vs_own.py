"""A foreign deployment's check vs this repository's own, on the same photos. Target: the
foreign check costs at most 1.3x the own one.

The own check reads every preprocessing stage from the taps model (one request) and the
ensemble's logits (another); the foreign one replays the ensemble step by step (one request
a step, three here) and asks the ensemble for its own answer, to check the replay. Both
run as a user runs them (own process, against a running server) with the same reference:
the torchvision recipe and the classifier's ONNX in ONNX Runtime. Rounds alternate the two,
so noise from other work on the machine hits both alike; medians are compared.

    .venv/bin/python benchmarks/foreign_vs_own.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.foreign import serve_foreign  # noqa: E402

TARGET = 1.3
TRAINING_SPEC = PROJECT_ROOT / "examples" / "foreign_deployment" / "training.toml"
ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"


def timed_check(url: str, *options: str, report: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "harness", "check", str(DEFAULT_PHOTOS), "--url", url, "--reference",
                          "torchvision", "--reference-model", str(ONNX), "--report", str(report), *options],
                         capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if run.returncode not in (0, 1):
        sys.exit(f"check exited {run.returncode}:\n{run.stderr[-3000:]}")
    return seconds, json.loads((report / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    own, foreign = [], []
    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, embedded_server(DEFAULT_REPOSITORY) as server, \
            serve_foreign(Path(tmp) / "foreign", ONNX) as foreign_server:
        for round_ in range(args.rounds):
            seconds, own_report = timed_check(server.grpc_url, report=Path(tmp) / "own")
            own.append(seconds)
            seconds, foreign_report = timed_check(foreign_server.grpc_url, "--model", "image_classifier", "--spec",
                                                  str(TRAINING_SPEC), report=Path(tmp) / "foreign-report")
            foreign.append(seconds)
            print(f"round {round_ + 1}: own {own[-1]:.1f} s, foreign {foreign[-1]:.1f} s", flush=True)
    images = own_report["images"]
    stages = lambda report: ", ".join(s["name"] for s in report["stages"])  # noqa: E731
    print(f"\n{images} photos, `harness check` (median of {args.rounds} rounds, each its own process):")
    print(f"  own (taps model; stages {stages(own_report)}): {statistics.median(own):.1f} s")
    print(f"  foreign (step by step; stages {stages(foreign_report)}): {statistics.median(foreign):.1f} s")
    ratio = statistics.median(foreign) / statistics.median(own)
    print(f"foreign/own: {ratio:.2f}x (target <= {TARGET}x): {'met' if ratio <= TARGET else 'MISSED'}")
    print(f"(the reference recipe and model are the same; the foreign spec is {TRAINING_SPEC.relative_to(PROJECT_ROOT)})")


if __name__ == "__main__":
    main()
