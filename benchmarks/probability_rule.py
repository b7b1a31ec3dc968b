"""The measurements behind the probability rule of harness/scores.py: how far aligned
deployments and a 1-level decoder difference move EfficientNet-Lite0's probabilities, and how
many images planted causes push beyond the rule, on the corpus photos, in-process.

The reference is the repository spec's OpenCV recipe; each variant is the same preprocessing
with one thing different (the aligned DALI graph; Pillow's own YCbCr->RGB, a 1-level decoder
difference; a channel swap; an antialiased resize; a stretch; ImageNet mean/std). Per variant:
top-1 flips, the worst (and 90th percentile) largest change of one class's probability and
total variation distance, and the images the rule (every class within PROBABILITY_ATOL, total
variation within PROBABILITY_TV) calls diverged, beside the logits rule's count.

    .venv/bin/python benchmarks/probability_rule.py [--images 65]
"""

from __future__ import annotations

import argparse

import numpy as np

from harness.compare.tolerance import DEFAULT_TOLERANCES
from harness.corpus import list_images
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.reference import BUILT_IN, load_recipe
from harness.reference.model import TorchModel
from harness.scores import PROBABILITY_ATOL, PROBABILITY_TV, softmax
from harness.spec import SPEC_FILENAME, load_spec, with_overrides
from harness.stage import Stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=65)
    args = parser.parse_args()
    spec = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME)
    p = spec.reference.preprocess
    opencv = BUILT_IN["opencv"]
    variants = {
        "aligned (the DALI graph)": BUILT_IN["dali"](p),
        "1-level decoder (Pillow YCbCr)": load_recipe(spec, f"{PROJECT_ROOT / 'specs' / 'decoder_difference.py'}:pillow_ycbcr"),
        "channel order BGR": opencv(with_overrides(p, input={"channel_order": "BGR"})),
        "antialias (area)": opencv(with_overrides(p, resize={"interpolation": "area", "antialias": True})),
        "stretch 224x224": opencv(with_overrides(p, resize={"mode": "stretch", "size": [224, 224]})),
        "ImageNet mean/std": opencv(with_overrides(p, normalize={"pixel_range": 1.0, "mean": [0.485, 0.456, 0.406],
                                                                 "std": [0.229, 0.224, 0.225]})),
    }
    files = [path.read_bytes() for path in list_images(DEFAULT_PHOTOS)[:args.images]]
    model = TorchModel()

    def logits(recipe) -> np.ndarray:
        inputs = np.stack([recipe(data)[Stage.INPUT] for data in files])
        return np.concatenate([model.logits(inputs[i:i + 16]) for i in range(0, len(inputs), 16)]).astype(np.float64)

    reference = logits(opencv(p))
    ref_p = softmax(reference)
    logit_rule = DEFAULT_TOLERANCES[Stage.OUTPUT]
    print(f"{len(files)} photos; rule: every class within {PROBABILITY_ATOL}, total variation within {PROBABILITY_TV}")
    print("| variant | top-1 flips | max class change: worst (p90) | total variation: worst (p90) | diverged (rule) "
          "| diverged (logits rule) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, recipe in variants.items():
        out = logits(recipe)
        dep_p = softmax(out)
        change = np.abs(dep_p - ref_p).max(axis=1)
        tv = 0.5 * np.abs(dep_p - ref_p).sum(axis=1)
        err = np.abs(out - reference)
        by_logits = ((err > logit_rule.atol).mean(axis=1) > logit_rule.max_fraction) | (err.mean(axis=1) > logit_rule.mean_atol)
        diverged = (change > PROBABILITY_ATOL) | (tv > PROBABILITY_TV)
        print(f"| {name} | {int((dep_p.argmax(1) != ref_p.argmax(1)).sum())} | {change.max():.3f} "
              f"({np.quantile(change, 0.9):.3f}) | {tv.max():.3f} ({np.quantile(tv, 0.9):.3f}) | {int(diverged.sum())} "
              f"| {int(by_logits.sum())} |")


if __name__ == "__main__":
    main()
