"""What a detection check costs beyond its own parts. In one run, on the same photos (words
rendered onto real photos of the shared ImageNet sample) and the same embedded server:

- the parts, one image at a time: the server's answers the check asks for (the taps model's
  stages, the ``detect_dali`` ensemble's boxes, map and geometry, the detector alone on the
  reference's input, the postprocessing step alone on the reference's map), the reference
  pipeline (decode, limit-side resize, normalize: OpenCV, as training) and the reference
  model (PP-OCRv6's detector in ONNX Runtime, then the DB postprocessing);
- the check itself (``harness.check.job.run``, in this process after one uncounted warm-up,
  as ``harness check --task detection`` runs it) with one worker: the parts in sequence plus
  the comparisons, the box matching, the visuals and the reports. Target: at most 1.3x the
  parts' sum. Also without report.html (``--format md,json,csv``): the HTML's figures
  (matplotlib, about 0.3 s each: histograms, heat maps, the boxes drawn on the worst photos)
  are a cost per run, not per image, which a small run cannot spread;
- the check with its default workers (images in flight), in images per second.

Rounds alternate the measurements (noise on a shared machine hits all alike); medians.

    .venv/bin/python benchmarks/detection_cost.py [--photos 16] [--rounds 3] [--spec specs/detection/small.toml]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from harness.check.job import DEFAULT_WORKERS, CheckOptions, run  # noqa: E402
from harness.client import IMAGE, TritonClient  # noqa: E402
from harness.detection.data import generate  # noqa: E402
from harness.packing import pack_images  # noqa: E402
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.preprocessing import TAP_TENSORS  # noqa: E402
from harness.session import Session, embedded_server  # noqa: E402
from harness.stage import GEOMETRY_TENSOR, Stage  # noqa: E402
from harness.target import Target  # noqa: E402
from harness.task import get_task  # noqa: E402

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
TARGET = 1.3


def parts(session: Session, client: TritonClient, files: list[Path], task_name: str = "detection") -> dict[str, float]:
    """Seconds of each part over every photo, one image at a time (what the check needs of each),
    for a task whose server postprocesses (``results``: the detector's, the segmenter's)."""
    task = session.deployment(client, "dali", task=task_name).configure_task(session.spec)
    recipe, model = session.recipe(), session.reference_model(threads=1, task=task_name)
    m = get_task(task_name).repository
    seconds = dict.fromkeys(("server answers", "reference pipeline", "reference model"), 0.0)
    for path in files:
        data = path.read_bytes()
        start = time.perf_counter()
        stages = recipe(data)
        middle = time.perf_counter()
        stages[Stage.OUTPUT] = model.logits(stages[Stage.INPUT][None])[0]
        stages.update(task.derive_reference(stages))
        done = time.perf_counter()
        client.infer(m.taps("dali"), {IMAGE: pack_images([data])}, list(TAP_TENSORS.values()))
        client.infer(m.ensemble("dali"), {IMAGE: pack_images([data])}, [m.ensemble_output, *m.results, GEOMETRY_TENSOR])
        client.infer(m.model, {m.model_input: np.ascontiguousarray(stages[Stage.INPUT][None])}, [m.model_output])
        client.infer(m.postprocess_model, {m.ensemble_output: stages[Stage.OUTPUT][None],
                                           GEOMETRY_TENSOR: stages[GEOMETRY_TENSOR][None]}, list(m.results))
        answered = time.perf_counter()
        seconds["reference pipeline"] += middle - start
        seconds["reference model"] += done - middle
        seconds["server answers"] += answered - done
    return seconds


def check(session: Session, images: Path, report: Path, workers: int, formats: tuple[str, ...] | None = None) -> float:
    start = time.perf_counter()
    result = run(session, CheckOptions(images, report, Target(task="detection"), workers=workers, formats=formats))
    seconds = time.perf_counter() - start
    if result.report.summary.compared != len(list(images.iterdir())):
        sys.exit(f"the check compared {result.report.summary.compared} images, not all")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spec", type=Path, default=PROJECT_ROOT / "specs" / "detection" / "small.toml")
    args = parser.parse_args()
    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, \
            embedded_server(DEFAULT_REPOSITORY, {"detection.toml": args.spec}) as server:
        tmp = Path(tmp)
        photos = sorted(SAMPLE.iterdir())[::500 // args.photos][:args.photos]
        generate(photos, tmp / "words", len(photos), seed=3)
        images = tmp / "words" / "images"
        files = sorted(images.iterdir())
        session = Session(DEFAULT_REPOSITORY, args.spec, server.grpc_url, task="detection")
        runs: dict[str, list[float]] = {"parts": [], "check, 1 worker": [], "check, 1 worker, no report.html": [],
                                        f"check, {DEFAULT_WORKERS} workers": []}
        split: list[dict[str, float]] = []
        with TritonClient(server.grpc_url, "grpc") as client:
            check(session, images, tmp / "warm-up", 1)  # not counted: first requests and imports are slower
            for round_ in range(args.rounds):
                for k, name in enumerate(list(runs)[round_ % len(runs):] + list(runs)[:round_ % len(runs)]):
                    if name == "parts":
                        split.append(parts(session, client, files))
                        runs[name].append(sum(split[-1].values()))
                    else:
                        workers = 1 if "1 worker" in name else DEFAULT_WORKERS
                        formats = ("md", "json", "csv") if "no report.html" in name else None
                        runs[name].append(check(session, images, tmp / f"check-{round_}-{k}", workers, formats))
                print(f"round {round_ + 1}: " + ", ".join(f"{n} {s[-1]:.1f} s" for n, s in runs.items()), flush=True)
    median = {name: statistics.median(s) for name, s in runs.items()}
    print(f"\n{len(files)} photos with words, spec {args.spec.name}, median of {args.rounds} rounds:")
    for part in split[0]:
        print(f"  {part}: {statistics.median(s[part] for s in split):.2f} s")
    for name, seconds in median.items():
        print(f"  {name}: {seconds:.2f} s ({len(files) / seconds:.2f} images/s)")
    ratio = median["check, 1 worker"] / median["parts"]
    bare = median["check, 1 worker, no report.html"] / median["parts"]
    html = median["check, 1 worker"] - median["check, 1 worker, no report.html"]
    print(f"report.html: {html:.1f} s a run (its figures: a cost per run, not per image)")
    print(f"check (1 worker) without report.html / its parts: {bare:.3f}x (target <= {TARGET}x): "
          f"{'met' if bare <= TARGET else 'MISSED'}")
    print(f"check (1 worker) / its parts: {ratio:.3f}x (target <= {TARGET}x): {'met' if ratio <= TARGET else 'MISSED'}")
    print(f"check ({DEFAULT_WORKERS} workers): {len(files) / median[f'check, {DEFAULT_WORKERS} workers']:.2f} images/s")


if __name__ == "__main__":
    main()
