"""Where the detection comparison's defaults come from (harness.detection.compare.DetectionTolerance):
how far an aligned deployment's boxes move from training's, against how far a planted cause
moves them, on the same real photos.

The deployment is the repository's DALI graph with the CPU decoder (the graph the served
``detect_dali`` runs), training the OpenCV recipe, both through PP-OCRv6's detector in ONNX
Runtime and the DB postprocessing of the spec; the photos are the ImageNet sample's photos
with text (``docs/detection-imagenet-text.json``). For each setting: per matched box, the
score change, the worst corner error and the IoU (max and 99th percentile), the boxes only
one side found (and how far their scores are from the threshold), and the images each
default rule calls diverged.

    .venv/bin/python benchmarks/detection_rule.py [--photos 172] [--spec model_repository/detection.toml]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from harness.compare.ties import explained_by_upstream  # noqa: E402
from harness.detection.compare import DetectionTolerance, compare_detections  # noqa: E402
from harness.detection.detector import TextDetector  # noqa: E402
from harness.detection.postprocess import from_table  # noqa: E402
from harness.geometry import Geometry  # noqa: E402
from harness.paths import PROJECT_ROOT  # noqa: E402
from harness.preprocessing import opencv  # noqa: E402
from harness.preprocessing.dali_graph import CpuPipelineRunner  # noqa: E402
from harness.spec import load_spec, with_overrides  # noqa: E402
from harness.stage import GEOMETRY_TENSOR, Stage  # noqa: E402
from harness.task import get_task  # noqa: E402
from harness.task.detection import NEAR_THRESHOLD  # noqa: E402

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
PLANTED = {
    "aligned": {},
    "channel order RGB": {"input": {"channel_order": "RGB"}},
    "antialias (area)": {"resize": {"interpolation": "area"}},
    "ImageNet mean/std": {"normalize": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}},
    "limit type max": {"resize": {"limit_type": "max"}},
}
"""What training did, per setting (the deployment stays the spec's)."""
PLANTED_POSTPROCESS = {"unclip ratio 2.0 (postprocessing)": {"unclip_ratio": 2.0},
                       "box threshold 0.6 (postprocessing)": {"box_thresh": 0.6}}
"""Training's postprocessing with one parameter changed, its preprocessing aligned: the check's
rule must call every changed image diverged (the deployed postprocessing alone, on training's
map, does not make training's boxes), however noisy the maps are (issue 34)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=172)
    parser.add_argument("--spec", type=Path, default=PROJECT_ROOT / "model_repository" / "detection.toml")
    args = parser.parse_args()
    spec = load_spec(args.spec)
    found = json.loads((PROJECT_ROOT / "docs" / "detection-imagenet-text.json").read_text())["photos"]
    names = [name for name, seen in found.items() if seen["text"]][:args.photos]
    post, deployed = from_table(spec.postprocess), spec.preprocess
    task = get_task("detection").configure(spec)
    threshold = post.params.score_threshold
    model = TextDetector(threads=2)
    runner = CpuPipelineRunner(deployed, 1)
    served, refused = [], []
    for name in names:
        data = (SAMPLE / name).read_bytes()
        result = runner.run([np.frombuffer(data, np.uint8)])[0]
        if result.error:  # refused by the deployment (e.g. longer than resize.max_side): not compared
            refused.append(f"{name}: {result.error}")
            continue
        x, geometry = result.outputs
        dep_map = model.probability(x[None])[0]
        served.append((name, data, post({"output": dep_map}, Geometry.from_tensor(geometry)), dep_map, geometry))
    print(f"{len(served)} photos with text, spec {args.spec.name} ({deployed.resize.extent()}), score threshold "
          f"{threshold}; deployment: the DALI graph (CPU decoder)")
    for line in refused:
        print(f"  refused by the deployment, not compared: {line}")
    settings = [(name, overrides, {}) for name, overrides in PLANTED.items()]
    settings += [(name, {}, changed) for name, changed in PLANTED_POSTPROCESS.items()]
    for setting, overrides, changed in settings:
        p = with_overrides(spec.reference.preprocess, **overrides) if overrides else spec.reference.preprocess
        trained = from_table({**spec.reference.postprocess, **changed}) if changed else post
        # the check's rule with training's postprocessing (the mirror of the isolated run uses it)
        judge = get_task("detection").configure(replace(spec, reference=replace(
            spec.reference, postprocess={**spec.reference.postprocess, **changed}))) if changed else task
        deltas, corners, ious, far, near, verdicts, judged = [], [], [], [], [], {}, {}
        for name, data, dep, dep_map, dep_geometry in served:
            stages = opencv.run(data, p)
            ref_map, geometry = model.probability(stages["input"][None])[0], p.resize.geometry(*stages["decode"].shape[:2])
            ref = trained({"output": ref_map}, geometry)
            c = compare_detections(ref, dep, threshold, DetectionTolerance(), stages["decode"].shape[:2])
            # the task's verdict: near-threshold changes by the maps' evidence too, held to the deployed
            # postprocessing alone on training's map (harness.task.detection, harness.compare.ties)
            reference = {Stage.POSTPROCESS: ref.to_array(), Stage.OUTPUT: ref_map, GEOMETRY_TENSOR: geometry.to_tensor()}
            alone = {Stage.POSTPROCESS: post({"output": ref_map}, geometry).to_array()}
            result = explained_by_upstream(judge.result_of(
                reference, {Stage.POSTPROCESS: dep.to_array(), Stage.OUTPUT: dep_map, GEOMETRY_TENSOR: dep_geometry},
                alone, NEAR_THRESHOLD, 0), None)
            judged[result.verdict.value] = judged.get(result.verdict.value, 0) + 1
            deltas += [abs(m.score_delta) for m in c.matches]
            corners += [m.corner_px for m in c.matches]
            ious += [m.iou for m in c.matches]
            for change in c.missed + c.extra:
                (near if change.near_threshold else far).append(abs(change.score - threshold))
            verdicts[c.verdict.value] = verdicts.get(c.verdict.value, 0) + 1
        q = lambda values, f: f(values) if values else float("nan")  # noqa: E731
        print(f"\n{setting}: {len(ious)} matched boxes, {len(far)} missed/extra beyond the margin, {len(near)} near "
              f"the score threshold; verdicts by the score alone {dict(sorted(verdicts.items()))}, with the maps' "
              f"evidence (the check's) {dict(sorted(judged.items()))}")
        print(f"  |score change|: max {q(deltas, max):.4f}, p99 {q(deltas, lambda v: np.percentile(v, 99)):.4f}")
        print(f"  worst corner (px): max {q(corners, max):.2f}, p99 {q(corners, lambda v: np.percentile(v, 99)):.2f}")
        print(f"  IoU: min {q(ious, min):.4f}, p1 {q(ious, lambda v: np.percentile(v, 1)):.4f}")
        if far:
            print(f"  missed/extra boxes' distance from the threshold: min {min(far):.3f}")
        both = [(d, c) for d, c in zip(deltas, corners)]
        for atol in (0.05, 0.1, 0.15):
            print(f"  matches beyond score_atol {atol}: {sum(d > atol for d, _ in both)}")


if __name__ == "__main__":
    sys.exit(main())
