"""What the task layer costs: each task's check, before and after, in one run.

On the same photos and the same server, the classification, embedding and detection checks
by the code of ``--before`` (default: where this branch left ``main``, the tree before issue
37's task plugins, unpacked from git) against the same checks by this checkout. Target: each
at most 1.05x.

Each check runs as a user runs it (its own process, against a running embedded server, the
same reference) after one uncounted warm-up check per task; rounds alternate the checks
(each round starting with another), so noise from other work on the machine hits all alike;
medians are compared.

    .venv/bin/python benchmarks/task_cost.py [--rounds 3] [--photos 12] [--before REV] [--tasks T ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

TARGET = 1.05
TASKS = {"classification": (), "embedding": ("--task", "embedding"), "detection": ("--task", "detection")}
UNTRACKED = ("data", "model_repository/classifier/model.onnx", "model_repository/classifier/labels.txt",
             "model_repository/embedder/model.onnx", "model_repository/detector/model.onnx")
"""What the unpacked old tree needs from this checkout: built, not in git."""
RUN = ("import sys, harness, harness.cli; assert harness.__file__.startswith(sys.argv[1]), harness.__file__; "
       "sys.exit(harness.cli.main(sys.argv[2:]))")
"""A check by the code of the tree given first (asserted: not this checkout's editable install)."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout.strip()


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


def timed_check(tree: Path, photos: Path, url: str, report: Path, *options: str) -> tuple[float, dict]:
    """Seconds of one `harness check` of ``photos`` by the code in ``tree``, and its report.json."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", RUN, str(tree / "harness"), "check", str(photos), "--url",
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
    parser.add_argument("--photos", type=int, default=12, help="the first N corpus photos (default: %(default)s)")
    parser.add_argument("--before", help="the code before (default: the merge base of HEAD and main)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    args = parser.parse_args()
    before_rev = git("rev-parse", args.before) if args.before else git("merge-base", "HEAD", "main")
    BUILD_DIR.mkdir(exist_ok=True)
    checks = {f"{task} {when}": task for task in args.tasks for when in ("before", "after")}
    runs: dict[str, list[float]] = {name: [] for name in checks}
    reports = {}
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, embedded_server(DEFAULT_REPOSITORY) as server:
        tmp = Path(tmp)
        before = unpack(before_rev, tmp / "before")
        photos = tmp / "photos"
        photos.mkdir()
        for path in sorted(DEFAULT_PHOTOS.glob("*.jpg"))[:args.photos]:
            shutil.copyfile(path, photos / path.name)
        trees = {"before": before, "after": PROJECT_ROOT}
        for task in args.tasks:  # warm-up, not counted: the server's first requests are slower
            timed_check(PROJECT_ROOT, photos, server.grpc_url, tmp / f"warm-up-{task}", *TASKS[task])
        for round_ in range(args.rounds):
            order = list(checks)[round_ % len(checks):] + list(checks)[:round_ % len(checks)]
            for name in order:
                task, when = name.split()
                seconds, reports[name] = timed_check(trees[when], photos, server.grpc_url,
                                                     tmp / name.replace(" ", "-"), *TASKS[task])
                runs[name].append(seconds)
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in runs.items()), flush=True)
    median = {name: statistics.median(seconds) for name, seconds in runs.items()}
    print(f"\n{args.photos} photos, `harness check` (median of {args.rounds} rounds, each its own process); "
          f"before = {before_rev[:10]}, after = this checkout:")
    for task in args.tasks:
        old, new = reports[f"{task} before"], reports[f"{task} after"]
        same = ([s["verdict"] for s in old["stages"]] == [s["verdict"] for s in new["stages"]]
                and old.get("events") == new.get("events"))
        ratio = median[f"{task} after"] / median[f"{task} before"]
        fastest = min(runs[f"{task} after"]) / min(runs[f"{task} before"])
        print(f"  {task}: before {median[f'{task} before']:.1f} s, after {median[f'{task} after']:.1f} s: "
              f"{ratio:.3f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'MISSED'}; fastest runs "
              f"{fastest:.3f}x); "
              f"reports: {'the same verdicts and events' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
