"""`harness merge` costs a small fraction of one shard.

Checks the corpus in N shards (`check --shard K/N`, one after the other, in this process,
against one embedded server), then merges them (median of 5 merges into fresh folders), and
prints the merge's wall time against one shard's (the mean of the N), both measured here.
Target: the merge at most a few percent of one shard. Both grow with the images (a shard
checks them, the merge reads their JSON lines), so the ratio holds at any size; the time
per image of each is printed too.

    .venv/bin/python benchmarks/merge_cost.py [--images data/photos] [--shards 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness.check.job import CheckOptions, run
from harness.merge import merge
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.session import Session, embedded_server
from harness.shard import Shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=DEFAULT_PHOTOS)
    parser.add_argument("--shards", type=int, default=3)
    args = parser.parse_args()
    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="merge-cost-", dir=BUILD_DIR) as tmp, \
            embedded_server(DEFAULT_REPOSITORY) as server:
        out = Path(tmp)
        shard_seconds, images = [], 0
        for k in range(args.shards):
            start = time.perf_counter()
            result = run(Session(url=server.grpc_url), CheckOptions(args.images, out / f"shard-{k}",
                                                                    shard=Shard(k, args.shards)))
            shard_seconds.append(time.perf_counter() - start)
            images += result.report.summary.images
            print(f"shard {k}/{args.shards}: {result.report.summary.images} images, {shard_seconds[-1]:.2f} s")
        merge_seconds = []
        for attempt in range(5):
            start = time.perf_counter()
            merged = merge([out / f"shard-{k}" for k in range(args.shards)], out / f"merged-{attempt}")
            merge_seconds.append(time.perf_counter() - start)
        assert merged.report.summary.images == images
    shard, merged_s = statistics.mean(shard_seconds), statistics.median(merge_seconds)
    print(f"\n{images} images in {args.shards} shards")
    print(f"one shard (mean): {shard:.2f} s, {1e3 * sum(shard_seconds) / images:.1f} ms an image")
    print(f"merge of {args.shards} shards (median of 5): {merged_s:.3f} s, {1e3 * merged_s / images:.2f} ms an image")
    print(f"merge / one shard: {merged_s / shard:.4f} ({100 * merged_s / shard:.2f}%)")


if __name__ == "__main__":
    main()
