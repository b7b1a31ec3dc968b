"""`harness merge` costs a small fraction of one shard.

Checks the corpus in N shards (`check --shard K/N`, one after the other, in this process,
against one embedded server), then merges them (median of 5 merges into fresh folders), and
prints the merge's wall time against one shard's (the mean of the N), both measured here.

A merge is two costs: folding the shards' images.jsonl (it grows with the images) and
writing the reports (report.html's plots: a fixed cost, which every shard also pays at its
end). Both are printed: the fold (reading and checking the shards, folding every image,
writing images.jsonl and per_image.csv) timed alone, the writing as the rest of the merge. On a few dozen photos
the fixed writing dominates; on a large set (the issue's 50,000 photos) the fold's cost per
image against the check's is the ratio that remains, printed as such.

    .venv/bin/python benchmarks/merge_cost.py [--images data/photos] [--shards 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness.check.job import CheckOptions, run
from harness.merge import fold, merge, read_shards
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
        shard_dirs = [out / f"shard-{k}" for k in range(args.shards)]
        merge_seconds, fold_seconds = [], []
        for attempt in range(5):
            start = time.perf_counter()
            merged = merge(shard_dirs, out / f"merged-{attempt}")
            merge_seconds.append(time.perf_counter() - start)
            start = time.perf_counter()  # the same merge without writing the reports
            (out / f"folded-{attempt}").mkdir()
            fold(read_shards(shard_dirs), out / f"folded-{attempt}")
            fold_seconds.append(time.perf_counter() - start)
        assert merged.report.summary.images == images
    shard, merged_s = statistics.mean(shard_seconds), statistics.median(merge_seconds)
    folding = statistics.median(fold_seconds)
    writing = max(merged_s - folding, 0.0)
    check_per_image, fold_per_image = sum(shard_seconds) / images, folding / images
    print(f"\n{images} images in {args.shards} shards")
    print(f"one shard (mean): {shard:.2f} s, {1e3 * check_per_image:.1f} ms an image (its reports included)")
    print(f"merge of {args.shards} shards (median of 5): {merged_s:.3f} s: writing the reports {writing:.3f} s "
          f"(fixed; every shard pays it too), folding the images {folding:.3f} s, {1e3 * fold_per_image:.3f} ms an image")
    print(f"merge / one shard, these {images} images: {merged_s / shard:.4f} ({100 * merged_s / shard:.1f}%)")
    print(f"fold per image / check per image: {fold_per_image / check_per_image:.5f} "
          f"({100 * fold_per_image / check_per_image:.3f}%): what the ratio tends to as shards grow")
    large = 50_000
    print(f"at {large} images in {args.shards} shards, from these per-image costs: merge "
          f"{writing + fold_per_image * large:.0f} s / shard {writing + check_per_image * large / args.shards:.0f} s = "
          f"{(writing + fold_per_image * large) / (writing + check_per_image * large / args.shards):.4f}")


if __name__ == "__main__":
    main()
