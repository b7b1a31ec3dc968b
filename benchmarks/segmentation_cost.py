"""What a segmentation check costs beyond its own parts, and what each planted cause costs the
masks. In one run, on the same photos (the shared ImageNet sample: one salient object each)
and the same embedded server:

- the parts, one image at a time: the server's answers the check asks for (the taps model's
  stages, the ``segment_dali`` ensemble's map, matte, mask and geometry, the segmenter alone
  on the reference's input, the postprocessing step alone on the reference's map), the
  reference pipeline (PIL decode, LANCZOS stretch, max normalization: rembg's) and the
  reference model (U²-Net-p in ONNX Runtime, then rembg's postprocessing);
- the check itself (``harness.check.job.run``, in this process after one uncounted warm-up,
  as ``harness check --task segmentation`` runs it) with one worker and without report.html
  (its figures are a cost per run, not per image). Target: at most 1.3x the parts' sum;
- each planted spec of ``specs/segmentation/planted/`` checked on the same photos: the masks'
  mean IoU and boundary F against the deployment's, the images whose mask changed, and the
  first divergent stage.

Rounds alternate the two measurements (noise on a shared machine hits both alike); medians.

    .venv/bin/python benchmarks/segmentation_cost.py [--photos 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detection_cost import parts  # noqa: E402  (this folder: the same parts, another task)

from harness.check.job import CheckOptions, run  # noqa: E402
from harness.client import TritonClient  # noqa: E402
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.session import Session, embedded_server  # noqa: E402
from harness.target import Target  # noqa: E402

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
SPEC = DEFAULT_REPOSITORY / "segmentation.toml"
PLANTED = PROJECT_ROOT / "specs" / "segmentation" / "planted"
TARGET = 1.3
TASK = "segmentation"


def check(session: Session, images: Path, report: Path):
    start = time.perf_counter()
    result = run(session, CheckOptions(images, report, Target(task=TASK), workers=1, formats=("md", "json", "csv")))
    seconds = time.perf_counter() - start
    if result.report.summary.compared != len(list(images.iterdir())):
        sys.exit(f"the check compared {result.report.summary.compared} images, not all")
    return seconds, result.report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, embedded_server(DEFAULT_REPOSITORY) as server:
        tmp = Path(tmp)
        images = tmp / "photos"
        images.mkdir()
        for photo in sorted(SAMPLE.iterdir())[::500 // args.photos][:args.photos]:
            (images / photo.name).write_bytes(photo.read_bytes())
        files = sorted(images.iterdir())
        session = Session(DEFAULT_REPOSITORY, SPEC, server.grpc_url, task=TASK)
        runs: dict[str, list[float]] = {"parts": [], "check, 1 worker, no report.html": []}
        split: list[dict[str, float]] = []
        with TritonClient(server.grpc_url, "grpc") as client:
            check(session, images, tmp / "warm-up")  # not counted: first requests and imports are slower
            for round_ in range(args.rounds):
                for k, name in enumerate(list(runs)[round_ % 2:] + list(runs)[:round_ % 2]):
                    if name == "parts":
                        split.append(parts(session, client, files, TASK))
                        runs[name].append(sum(split[-1].values()))
                    else:
                        runs[name].append(check(session, images, tmp / f"check-{round_}-{k}")[0])
                print(f"round {round_ + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in runs.items()), flush=True)
            effects = {}
            for spec in [SPEC, *sorted(PLANTED.glob("*.toml"))]:
                planted = Session(DEFAULT_REPOSITORY, spec, server.grpc_url, task=TASK)
                effects[spec.stem if spec != SPEC else "aligned"] = check(planted, images, tmp / f"effect-{spec.stem}")[1]
    median = {name: statistics.median(s) for name, s in runs.items()}
    print(f"\n{len(files)} photos of the ImageNet sample, median of {args.rounds} rounds:")
    for part in split[0]:
        print(f"  {part}: {statistics.median(s[part] for s in split):.2f} s")
    for name, seconds in median.items():
        print(f"  {name}: {seconds:.2f} s ({len(files) / seconds:.2f} images/s)")
    ratio = median["check, 1 worker, no report.html"] / median["parts"]
    print(f"check (1 worker, no report.html) / its parts: {ratio:.3f}x (target <= {TARGET}x): "
          f"{'met' if ratio <= TARGET else 'MISSED'}")
    print("\nthe planted causes' effect on the masks (segment_dali against each spec's reference):")
    print("| spec | first divergent stage | mean IoU | mean boundary F | images whose mask changed (ties) |")
    print("|---|---|---|---|---|")
    for name, report in effects.items():
        f, s = report.summary.figures, report.summary
        print(f"| {name} | {s.first_divergent_stage or 'none'} | {f['mean_iou']:.4f} | {f['mean_boundary_f']:.3f} | "
              f"{len(s.events)} ({s.ties}) |")


if __name__ == "__main__":
    main()
