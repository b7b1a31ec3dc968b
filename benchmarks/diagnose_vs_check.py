"""`harness diagnose` vs one `harness check` on the same 50 images, for one and for three
planted causes. Targets: diagnose at most 2x one check with one cause, at most 4x with three.

Both commands run as a user runs them (own process) against one running server, with the
same spec. Diagnose reads the deployed side from the server once, then searches in rounds
(one per cause, plus the cost of each cause); its diagnosis.json says where its time went,
printed here beside the wall times.

    .venv/bin/python benchmarks/diagnose_vs_check.py [--images 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from harness.corpus import list_images, make_variants
from harness.paths import BUILD_DIR, DEFAULT_PHOTOS, DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.session import embedded_server

PLANTED = PROJECT_ROOT / "specs" / "planted"
CASES = {  # name -> (spec, target ratio)
    "one cause (antialias)": (PLANTED / "antialias.toml", 2.0),
    "three causes (antialias + channel order + normalization scale)":
        (PLANTED / "antialias+channel_order+normalization_scale.toml", 4.0),
}


def timed(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=50)
    args = parser.parse_args()
    images = BUILD_DIR / f"bench-{args.images}"
    images.mkdir(parents=True, exist_ok=True)
    for p in make_variants(list_images(DEFAULT_PHOTOS), BUILD_DIR / "bench-variants", args.images):
        if (images / p.name).is_symlink():  # a link leading outside the folder is not an input
            (images / p.name).unlink()
        if not (images / p.name).exists():
            os.link(p, images / p.name)
    rows = []
    with embedded_server(DEFAULT_REPOSITORY, None) as server:
        for case, (spec, target) in CASES.items():
            common = ["--spec", str(spec), "--url", server.grpc_url]
            check, checked = timed("check", str(images), *common, "--report", str(BUILD_DIR / "bench-check"))
            report = BUILD_DIR / "bench-diagnose"
            diagnose, diagnosed = timed("diagnose", str(images), *common, "--report", str(report))
            if checked.returncode not in (0, 1) or diagnosed.returncode not in (0, 1):
                sys.exit(f"{case}: check exited {checked.returncode}, diagnose {diagnosed.returncode}:\n"
                         f"{checked.stderr[-2000:]}\n{diagnosed.stderr[-2000:]}")
            d = json.loads((report / "diagnosis.json").read_text())
            rows.append((case, spec, target, check, diagnose, d))
    print(f"\n{args.images} images, one check vs one diagnose per case (wall seconds, each its own process):")
    for case, spec, target, check, diagnose, d in rows:
        ratio = diagnose / check
        causes = ", ".join(f"{c['cause']} ({c['cost']['top1_flips']} flips)" for c in d["causes"]) or "none"
        timing = d["timing_seconds"]
        print(f"\n{case}: {spec.relative_to(PROJECT_ROOT)}\n"
              f"  check {check:.1f} s, diagnose {diagnose:.1f} s: ratio {ratio:.2f} (target <= {target:g}: "
              f"{'met' if ratio <= target else 'MISSED'})\n"
              f"  causes by cost: {causes}; rounds {len(d['rounds'])}; remaining divergence: "
              f"{d['remaining_divergence'] or 'none'}\n"
              f"  diagnose's time: process start and CLI imports {diagnose - timing['total']:.1f} s; "
              + ", ".join(f"{k} {v:.1f} s" for k, v in timing.items() if k != "total")
              + "\n  (phases inside the search are summed over the images in parallel, so they can exceed its wall time)\n"
              f"  work: {', '.join(f'{k} {v}' for k, v in d['counts'].items())}")


if __name__ == "__main__":
    main()
