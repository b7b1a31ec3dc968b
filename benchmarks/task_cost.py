"""What the task layer costs. In one run, on the same photos and the same server:

1. the classification check before the task layer (the code of the commit before
   ``harness/task/`` was added, unpacked from git) against the same check now. Target: at
   most 1.05x;
2. the embedding check (``--task embedding``: embed_dali) against the classification check,
   both now. Target: at most 1.2x.

Each check runs as a user runs it (its own process, against a running embedded server, the
same reference) after one uncounted warm-up check; rounds alternate the three (each round
starting with another), so noise from other work on the machine hits all alike; medians
are compared.

    .venv/bin/python benchmarks/task_cost.py [--rounds 3] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.session import embedded_server  # noqa: E402

TARGETS = {"classification after/before": 1.05, "embedding/classification": 1.2}
UNTRACKED = ("data", "model_repository/classifier/model.onnx", "model_repository/classifier/labels.txt")
"""What the unpacked old tree needs from this checkout: built, not in git."""
RUN = ("import sys, harness, harness.cli; assert harness.__file__.startswith(sys.argv[1]), harness.__file__; "
       "sys.exit(harness.cli.main(sys.argv[2:]))")
"""A check by the code of the tree given first (asserted: not this checkout's editable install)."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout.strip()


def before_task_layer() -> str:
    """The commit before the one that added ``harness/task/``."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", "harness/task/__init__.py").splitlines()[-1]
    return git("rev-parse", f"{added}~1")


def unpack(rev: str, out: Path) -> Path:
    """The tracked tree at ``rev`` in ``out``, with the built files linked from this checkout."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=PROJECT_ROOT, capture_output=True,
                             check=True).stdout
    out.mkdir(parents=True)
    archive_path = out.parent / "before.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(out, filter="data")
    for name in UNTRACKED:
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(PROJECT_ROOT / name)
    return out


def timed_check(tree: Path, url: str, report: Path, *options: str) -> tuple[float, dict]:
    """Seconds of one `harness check` of the photos by the code in ``tree``, and its report.json."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", RUN, str(tree / "harness"), "check", str(DEFAULT_PHOTOS), "--url",
                          url, "--report", str(report), *options],
                         cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                         text=True)
    seconds = time.perf_counter() - start
    if run.returncode not in (0, 1):
        sys.exit(f"check ({tree}) exited {run.returncode}:\n{run.stderr[-3000:]}")
    return seconds, json.loads((report / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", help="the code before the task layer (default: the commit before harness/task/)")
    args = parser.parse_args()
    before_rev = args.before or before_task_layer()
    BUILD_DIR.mkdir(exist_ok=True)
    runs = {"classification before": [], "classification after": [], "embedding": []}
    reports = {}
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, embedded_server(DEFAULT_REPOSITORY) as server:
        before = unpack(before_rev, Path(tmp) / "before")
        checks = {"classification before": (before, ()), "classification after": (PROJECT_ROOT, ()),
                  "embedding": (PROJECT_ROOT, ("--task", "embedding"))}
        # Warm-up, not counted: the server's first requests and the first imports are slower.
        timed_check(PROJECT_ROOT, server.grpc_url, Path(tmp) / "warm-up")
        for round_ in range(args.rounds):
            order = list(checks)[round_ % len(checks):] + list(checks)[:round_ % len(checks)]
            for name in order:
                tree, options = checks[name]
                seconds, reports[name] = timed_check(tree, server.grpc_url, Path(tmp) / name.replace(" ", "-"),
                                                     *options)
                runs[name].append(seconds)
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in runs.items()), flush=True)
    median = {name: statistics.median(seconds) for name, seconds in runs.items()}
    old, new = reports["classification before"], reports["classification after"]
    same = ([s["verdict"] for s in old["stages"]] == [s["verdict"] for s in new["stages"]]
            and old["flips"] == new["flips"])
    print(f"\n{new['images']} photos, `harness check` (median of {args.rounds} rounds, each its own process); "
          f"before = {before_rev[:10]}:")
    for name, seconds in median.items():
        print(f"  {name}: {seconds:.1f} s")
    print(f"classification reports before and after: {'the same verdicts and flips' if same else 'DIFFERENT'}")
    ratios = {"classification after/before": median["classification after"] / median["classification before"],
              "embedding/classification": median["embedding"] / median["classification after"]}
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.3f}x (target <= {TARGETS[name]}x): {'met' if ratio <= TARGETS[name] else 'MISSED'}")


if __name__ == "__main__":
    main()
