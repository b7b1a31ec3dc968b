"""The measurements behind diagnose's thresholds (harness/diagnose/outcomes.py: MIN_ERROR_DROP,
MIN_IMAGES_LEFT): what every culprit of the catalogue does to the first divergent stage, the
real causes against those that are no cause, on deployed sides made in-process.

Each scenario is a deployed side built here from the corpus photos with the repository spec's
OpenCV recipe and the default model: planted causes the catalogue holds (the truth known, by
hypothesis), differences it does not hold (a blur, a gamma curve, a brightness shift, a JPEG
re-encode, noise on the logits: no hypothesis is a cause), and a mix. Round by round (the true
causes applied as found), every hypothesis is evaluated on every image and its improvement of
the round's stage recorded: the relative drop of the stage's error (mean RMSE) and the share of
the diverged images it moves out of ``diverged``. Printed: per scenario, the true cause's and
the best non-cause's improvement; then the smallest true improvement and the largest by a
non-cause, what the thresholds must separate.

    .venv/bin/python benchmarks/diagnose_thresholds.py [--images 33] [--out rows.jsonl]

Slow: every hypothesis on every image of every scenario (about 40 minutes on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np

from harness.compare.tolerance import tolerances_for
from harness.corpus import list_images
from harness.diagnose import Diagnoser, candidate_hypotheses
from harness.diagnose.deployed import Deployed
from harness.diagnose.outcomes import MIN_ERROR_DROP, MIN_IMAGES_ERROR_DROP, MIN_IMAGES_LEFT
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.preprocessing import opencv as cv
from harness.reference import BUILT_IN
from harness.reference.model import TorchModel
from harness.spec import SPEC_FILENAME, load_spec, with_overrides
from harness.stage import Stage

SPEC = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME)
BASE = SPEC.reference.preprocess


def opencv(**overrides):
    return BUILT_IN["opencv"](with_overrides(BASE, **overrides))


def on_crop(change, p=BASE):
    """A difference the catalogue does not hold, made to the crop (the input follows)."""
    def post(stages):
        stages[Stage.CROP] = change(stages[Stage.CROP])
        stages[Stage.INPUT] = cv.normalize(stages[Stage.CROP], p)
        return stages
    return post


def jpeg_again(quality: int):
    class Reencoded(BUILT_IN["opencv"]):
        def decode(self, data):
            image = super().decode(data)
            encoded = cv2.imencode(".jpg", np.ascontiguousarray(image[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])[1]
            return np.ascontiguousarray(cv2.imdecode(encoded, cv2.IMREAD_COLOR)[..., ::-1])
    return Reencoded(BASE)


BGR = with_overrides(BASE, input={"channel_order": "BGR"})
SCENARIOS = {  # name -> (deployed recipe, change after it, noise on the logits, the true causes by hypothesis name)
    "channel order": (lambda: opencv(input={"channel_order": "BGR"}), None, 0, ["channel order BGR"]),
    "stretch": (lambda: opencv(resize={"mode": "stretch", "size": [224, 224]}), None, 0,
                ["resize mode: stretch to 224x224"]),
    "normalization scale": (lambda: opencv(normalize={"pixel_range": 1.0}), None, 0,
                            ["pixels scaled to 0-1 (mean/std numbers unchanged)"]),
    "interpolation area": (lambda: opencv(resize={"interpolation": "area"}), None, 0, ["interpolation area"]),
    "crop offsets half to even": (lambda: opencv(crop={"offset_rounding": "half_even"}), None, 0,
                                  ["crop offsets rounded half_even"]),
    "fast IDCT": (lambda: opencv(decode={"fast_idct": True}), None, 0, ["fast IDCT"]),
    "stretch + channel order": (lambda: opencv(resize={"mode": "stretch", "size": [224, 224]},
                                               input={"channel_order": "BGR"}), None, 0,
                                ["resize mode: stretch to 224x224", "channel order BGR"]),
    "area + channel order": (lambda: opencv(resize={"interpolation": "area"}, input={"channel_order": "BGR"}), None, 0,
                             ["interpolation area", "channel order BGR"]),
    "blur 0.6 (none)": (opencv, on_crop(lambda c: cv2.GaussianBlur(c, (0, 0), 0.6)), 0, []),
    "blur 1.0 (none)": (opencv, on_crop(lambda c: cv2.GaussianBlur(c, (0, 0), 1.0)), 0, []),
    "gamma 1.1 (none)": (opencv, on_crop(lambda c: np.clip(255 * (c / 255.0) ** 1.1 + 0.5, 0, 255).astype(np.uint8)),
                         0, []),
    "+4 levels (none)": (opencv, on_crop(lambda c: np.clip(c.astype(np.int16) + 4, 0, 255).astype(np.uint8)), 0, []),
    "JPEG again q85 (none)": (lambda: jpeg_again(85), None, 0, []),
    "logits noise 0.3 (none)": (opencv, None, 0.3, []),
    "blur 0.6 + channel order": (lambda: opencv(input={"channel_order": "BGR"}),
                                 on_crop(lambda c: cv2.GaussianBlur(c, (0, 0), 0.6), BGR), 0, ["channel order BGR"]),
}


def deployed_side(files: list[Path], model, recipe, change, noise: float) -> Deployed:
    out = Deployed([], [], [], [])
    for path in files:
        data = path.read_bytes()
        try:
            stages = recipe(data)
        except Exception:  # noqa: BLE001 - an image the recipe refuses is left out, as diagnose leaves it
            continue
        out.names.append(path.name)
        out.data.append(data)
        out.stages.append(change(stages) if change else stages)
    inputs = np.stack([s[Stage.INPUT] for s in out.stages])
    logits = np.concatenate([model.logits(inputs[i:i + 16]) for i in range(0, len(inputs), 16)])
    logits = logits + noise * np.random.default_rng(0).standard_normal(logits.shape).astype(np.float32)
    for stages, row in zip(out.stages, logits):
        stages[Stage.OUTPUT] = row
    return out


def measure(name: str, files: list[Path], model) -> list[dict]:
    make, change, noise, truth = SCENARIOS[name]
    diagnoser = Diagnoser(deployed_side(files, model, make(), change, noise), "opencv", BASE, SPEC.preprocess, model,
                          tolerances_for(SPEC.preprocess, SPEC.tolerances), lambda: TorchModel(half=True), tie_margin=0.5)
    rows, applied, base, truth = [], [], diagnoser.baseline(), list(truth)
    try:
        for number in (1, 2, 3):
            focus = base.first_divergent()
            if focus is None:
                break
            recipe, reference, *_ = diagnoser.setting(applied)
            found = None
            for h in candidate_hypotheses(recipe, reference, diagnoser.deployed_spec):
                if h.culprit in {x.culprit for x in applied}:
                    continue
                e = diagnoser.evaluate(applied, h, base)
                if not e.evaluated:
                    continue
                gain = e.improvement(base, focus)
                rows.append({"scenario": name, "round": number, "stage": str(focus), "hypothesis": h.name,
                             "cause": h.name in truth, "error_drop": round(gain.error_drop, 4),
                             "images_left": gain.images_left, "diverged_before": gain.diverged_before,
                             "real": gain.real})
                if h.name in truth:
                    found = (h, e)
            if found is None:
                break
            applied.append(found[0])
            base = found[1]
            truth.remove(found[0].name)
    finally:
        diagnoser.close()
    return rows


def share(row: dict) -> float:
    return row["images_left"] / row["diverged_before"] if row["diverged_before"] else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=33, help="every other corpus photo, at most this many")
    parser.add_argument("--out", type=Path, default=None, help="also write every row here (JSON lines)")
    args = parser.parse_args()
    files = list_images(DEFAULT_PHOTOS)[::2][:args.images]
    model = TorchModel(threads=1)
    rows = []
    print(f"{len(files)} photos; thresholds: error drop {MIN_ERROR_DROP:.0%}, or {MIN_IMAGES_LEFT:.0%} of the diverged "
          f"images out of `diverged` with an error drop of {MIN_IMAGES_ERROR_DROP:.0%}")
    print("| scenario | round: stage | true cause: error drop, images out | best non-cause: error drop, images out |")
    print("|---|---|---|---|")
    for name in SCENARIOS:
        found = measure(name, files, model)
        rows += found
        for number in sorted({r["round"] for r in found}):
            these = [r for r in found if r["round"] == number]
            true = [r for r in these if r["cause"]]
            other = max((r for r in these if not r["cause"]), key=lambda r: (r["error_drop"], share(r)), default=None)
            cell = lambda r: "-" if r is None else (  # noqa: E731
                f"{r['hypothesis']}: {r['error_drop']:+.1%}, {r['images_left']}/{r['diverged_before']}")
            print(f"| {name} | {number}: {these[0]['stage']} | {cell(true[0] if true else None)} | {cell(other)} |")
    causes, others = [r for r in rows if r["cause"]], [r for r in rows if not r["cause"]]
    print(f"\nsmallest true-cause improvement: error drop {min(r['error_drop'] for r in causes):+.1%}, "
          f"images out {min(share(r) for r in causes):.0%}; counted real: {sum(r['real'] for r in causes)} of {len(causes)}")
    print(f"largest non-cause improvement: error drop {max(r['error_drop'] for r in others):+.1%}, images out "
          f"{max(share(r) for r in others):.0%}; counted real: {sum(r['real'] for r in others)} of {len(others)}")
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
