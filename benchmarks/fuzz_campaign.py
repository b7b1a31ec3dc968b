"""The fuzz campaign at benchmark size: hostile files (tests/fuzz_files.py, seeded) beside
the corpus photos, through `harness check`, `harness infer --pipeline both` and
`harness accuracy`, against one running server. Prints, per command: exit status, wall
time, tracebacks (target 0), and images in vs compared + failed + rejected (target equal);
then whether the server is still ready and still calls the squirrel a fox squirrel.

    .venv/bin/python benchmarks/fuzz_campaign.py [--scale 4] [--seed 0] [--url HOST:PORT]

``--scale 1`` is the test's size (286 files); 4 gives about 900.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY  # noqa: E402
from harness.session import embedded_server  # noqa: E402
from tests.fuzz_files import hostile_files  # noqa: E402


def harness(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    env = {**os.environ, "COLUMNS": "400"}
    result = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env)
    return result, time.perf_counter() - start


def line(name: str, result: subprocess.CompletedProcess, seconds: float, counts: str) -> None:
    tracebacks = (result.stdout + result.stderr).count("Traceback")
    print(f"{name:<10} exit {result.returncode}  {seconds:7.1f} s  tracebacks {tracebacks}  {counts}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="gRPC host:port of a running server (default: an embedded one)")
    parser.add_argument("--timeout", default="30", help="seconds per request: a model that died shows fast (default 30)")
    args = parser.parse_args()
    limits = ("--timeout", args.timeout)
    with ExitStack() as stack:
        url = args.url or stack.enter_context(embedded_server(DEFAULT_REPOSITORY, None)).grpc_url
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fuzz-", dir=BUILD_DIR)))
        files = hostile_files(DEFAULT_PHOTOS, work / "images", seed=args.seed, scale=args.scale)
        for photo in sorted(DEFAULT_PHOTOS.iterdir()):
            os.link(photo, work / "images" / photo.name)
        total = len(os.listdir(work / "images"))
        print(f"{len(files)} hostile files + {total - len(files)} photos = {total} (seed {args.seed}, scale {args.scale})")

        result, seconds = harness("check", str(work / "images"), "--url", url, "--report", str(work / "check"),
                                  "--no-isolate", "--retries", "1", *limits)
        if result.returncode == 2:
            print(result.stderr[-600:])
        r = json.loads((work / "check" / "report.json").read_text())
        rejected = sum(len(v) for v in r["rejected"].values())
        line("check", result, seconds, f"in {total} = compared {r['compared']} + failed {len(r['failed'])} "
             f"+ rejected {rejected} ({r['compared'] + len(r['failed']) + rejected})")

        result, seconds = harness("infer", str(work / "images"), "--pipeline", "both", "--url", url, *limits)
        rows = sum(1 for text in result.stdout.splitlines()  # a wrapped reason's lines have a blank first cell
                   if text.startswith("│") and text[1:].split("│")[0].strip())
        line("infer", result, seconds, f"rows {rows} of {total}")

        result, seconds = harness("accuracy", str(work / "images"), "--url", url, "--report", str(work / "accuracy"),
                                  *limits)
        d = json.loads((work / "accuracy" / "accuracy.json").read_text())["dataset"]
        line("accuracy", result, seconds, f"in {d['images']} = evaluated {d['evaluated']} + left out {d['failed']} "
             f"(rejected {d['rejected']})")

        from harness.client import TritonClient

        with TritonClient(url, "grpc", timeout=30) as client:
            squirrel = (DEFAULT_PHOTOS / "squirrel_cls.jpg").read_bytes()
            labels = [client.classify([squirrel], p)[0][0].label for p in ("dali", "opencv")]
            print(f"server afterwards: ready {client.is_ready()}, squirrel_cls.jpg -> {labels}")
            for p in ("dali", "opencv"):  # the taps models, which check reads
                try:
                    print(f"taps {p}: input {client.stages(squirrel, p)['input'].shape}")
                except Exception as exc:
                    print(f"taps {p}: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
