"""`harness diagnose` vs one `harness check` on the same 50 images, in one run.

Diagnose replays ~25 hypotheses but reads the deployed side from the server once, and drops a
hypothesis that does no better on the first few images; target: at most 3x one check.
Both commands run as a user runs them (own process) against one running server.

    .venv/bin/python benchmarks/diagnose_vs_check.py [--images 50] [--spec specs/misaligned_resize.toml]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from harness.cli.common import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY, PROJECT_ROOT, embedded_server
from harness.corpus import list_images, make_variants


def timed(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--spec", default=str(PROJECT_ROOT / "specs" / "misaligned_resize.toml"))
    args = parser.parse_args()
    images = BUILD_DIR / f"bench-{args.images}"
    images.mkdir(parents=True, exist_ok=True)
    for p in make_variants(list_images(DEFAULT_PHOTOS), BUILD_DIR / "bench-variants", args.images):
        if not (images / p.name).exists():
            (images / p.name).symlink_to(p)
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        common = ["--spec", args.spec, "--url", server.grpc_url]
        check = timed("check", str(images), *common, "--report", str(BUILD_DIR / "bench-check"))
        diagnose = timed("diagnose", str(images), *common, "--report", str(BUILD_DIR / "bench-diagnose"))
    print(f"\n{args.images} images, spec {args.spec}: check {check:.1f} s, diagnose {diagnose:.1f} s, "
          f"ratio {diagnose / check:.2f} (target <= 3)")


if __name__ == "__main__":
    main()
