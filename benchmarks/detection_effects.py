"""What each planted cause costs a text detector on a labeled set, measured end to end: `harness
accuracy --task detection` of the served ``detect_dali`` (the repository's detection.toml, the
cpu profile) against training's preprocessing with one thing changed, on words rendered onto
real photos (``harness.detection.data``, the ImageNet sample's photos without text of their
own). Per setting: precision, recall and F1 at IoU 0.5 of training and of the deployment, the
F1 difference, the images whose boxes changed (and of those, near a threshold), McNemar's p on
the images every word of which is found.

    .venv/bin/python benchmarks/detection_effects.py [--photos 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tomli_w  # noqa: E402

from harness.accuracy.job import AccuracyOptions, run  # noqa: E402
from harness.detection.data import generate  # noqa: E402
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY, PROJECT_ROOT  # noqa: E402
from harness.session import Session, embedded_server  # noqa: E402

SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
SPEC = DEFAULT_REPOSITORY / "detection.toml"
PLANTED = {
    "aligned": {},
    "limit type max (training shrank the longer side to 736)": {"resize": {"limit_type": "max"}},
    "limit side 960 (PaddleOCR's det config)": {"resize": {"limit_side_len": 960}},
    "channel order RGB": {"input": {"channel_order": "RGB"}},
    "ImageNet mean/std": {"normalize": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}},
    "antialiased resize (cv2 INTER_AREA)": {"resize": {"interpolation": "area"}},
}
"""What training did differently ([reference] of a spec extending the served detection.toml)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = json.loads((PROJECT_ROOT / "docs" / "detection-imagenet-text.json").read_text())["photos"]
    clean = sorted(p for p in SAMPLE.iterdir() if p.name not in found)
    BUILD_DIR.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp, embedded_server(DEFAULT_REPOSITORY) as server:
        tmp = Path(tmp)
        labels = generate(clean, tmp / "words", args.photos, seed=args.seed)
        for name, overrides in PLANTED.items():
            spec = tmp / f"planted-{len(rows)}.toml"
            spec.write_text(tomli_w.dumps({"extends": str(SPEC), "reference": overrides}))
            session = Session(DEFAULT_REPOSITORY, spec, server.grpc_url, task="detection")
            result = run(session, AccuracyOptions(labels, tmp / f"report-{len(rows)}", pipelines=("dali",),
                                                  task="detection"))
            reference, deployed = result.report.effect.paths
            changed = deployed.changed()
            rows.append((name, reference, deployed, changed, changed - deployed.changed(ties=False)))
            print(f"{name}: F1 {reference.f1:.3f} -> {deployed.f1:.3f}", flush=True)
    evaluated = len(rows[0][1].outcomes)
    print(f"\n{evaluated} photos, {rows[0][1].labeled} words (seed {args.seed}); deployment: detect_dali, "
          f"detection.toml (cpu profile); training: the same with one change\n")
    print("| training differs by | precision | recall | F1 (training -> deployed) | F1 diff | images whose boxes "
          "changed (near a threshold) | McNemar b/c, p |")
    print("|---|---|---|---|---|---|---|")
    for name, ref, dep, changed, ties in rows:
        test = f"{dep.mcnemar.b}/{dep.mcnemar.c}, {dep.mcnemar.p_value:.3g}" if dep.mcnemar else "-"
        print(f"| {name} | {ref.precision:.3f} -> {dep.precision:.3f} | {ref.recall:.3f} -> {dep.recall:.3f} | "
              f"{ref.f1:.3f} -> {dep.f1:.3f} | {100 * (dep.f1 - ref.f1):+.1f} pts | {changed} ({ties}) | {test} |")


if __name__ == "__main__":
    main()
