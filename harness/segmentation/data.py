"""Labeled segmentation data from real photos, made as matting benchmarks make theirs: composites.

An object is cut out of one real photo by a high-confidence mask, the core of the reference's
own matte (the repository's spec and U²-Net-p, as ``harness check`` runs the reference: the
pixels whose matte is at least :data:`CORE`), and pasted, hard-edged, onto another real photo
(resized to the object photo's size, ``cv2.INTER_AREA``). The pasted region is the label,
exactly: ``masks/<stem>.png`` holds 255 where the object's pixels are and 0 elsewhere.

An object photo is used only where its core is a real object: between :data:`MIN_FRACTION` and
:data:`MAX_FRACTION` of the photo, and the matte confident around it (the pixels between 0.05
and :data:`CORE` at most :data:`MAX_UNSURE` of the core's). Deterministic: one seed picks
the object photos and the backgrounds.

``python -m harness.segmentation.data generate PHOTOS BACKGROUNDS OUT --count 40 --seed 0``
writes ``OUT/images/NNNN_<object>_on_<background>.jpg`` and ``OUT/masks/`` of the same stems;
``harness accuracy --task segmentation OUT/images --labels OUT/masks`` scores them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
from PIL import Image

from harness.validation import COUNT, SEED

CORE = 0.95
"""A pixel of the object: the reference's matte at least this (a confident foreground)."""
MIN_FRACTION, MAX_FRACTION = 0.05, 0.6
"""The share of its photo an object's core may cover."""
MAX_UNSURE = 0.25
"""The unsure pixels (matte between 0.05 and :data:`CORE`) an object photo may have, as a share
of its core's (every 25th ImageNet sample photo: 0.06 to 0.2 for a clear animal or object, 0.4
to 1.5 for a furry, thin or cluttered one)."""
QUALITY = 95


def reference_matte(root: Path | None = None) -> Callable[[bytes], np.ndarray]:
    """The reference's matte of a photo (its bytes -> [H, W], 0 to 1): the repository's
    segmentation spec's reference recipe, U²-Net-p in ONNX Runtime, the spec's ``[postprocess]``."""
    from harness.model import ONNX_FILENAME, onnx_session
    from harness.paths import WORKING_ROOT
    from harness.reference.recipes import TorchvisionRecipe
    from harness.segmentation.model import INPUT_NAME, OUTPUT_NAME, SEGMENTER, SPEC_FILE
    from harness.segmentation.postprocess import SegmentationPostprocess
    from harness.spec import load_spec
    from harness.stage import Stage

    repository = (root or WORKING_ROOT) / "model_repository"
    spec = load_spec(repository / SPEC_FILE)
    recipe = TorchvisionRecipe(spec.reference.preprocess)
    session = onnx_session(repository / SEGMENTER / ONNX_FILENAME, threads=1)
    post = SegmentationPostprocess(spec.reference.postprocess)

    def matte(data: bytes) -> np.ndarray:
        stages = recipe(data)
        pred = session.run([OUTPUT_NAME], {INPUT_NAME: stages[Stage.INPUT][None]})[0]
        return post({OUTPUT_NAME: pred[0]}, stages[Stage.DECODE].shape[:2])[0]

    return matte


@dataclass(frozen=True)
class Composite:
    name: str
    """The stem of its image and of its mask."""
    image: np.ndarray
    """RGB, the object's photo's size."""
    mask: np.ndarray
    """bool [H, W]: the pasted pixels."""
    source: str
    background: str


def object_core(matte: np.ndarray) -> np.ndarray | None:
    """The object's pixels (matte >= :data:`CORE`), or None where the photo holds no usable object."""
    core = matte >= CORE
    unsure = ((matte > 0.05) & ~core).sum()
    return core if MIN_FRACTION <= core.mean() <= MAX_FRACTION and unsure <= MAX_UNSURE * core.sum() else None


def composite(photo: np.ndarray, core: np.ndarray, background: np.ndarray) -> np.ndarray:
    """``photo``'s pixels where ``core``, ``background`` (resized to the photo's size) elsewhere."""
    h, w = core.shape
    back = cv2.resize(background, (w, h), interpolation=cv2.INTER_AREA)
    return np.where(core[..., None], photo, back)


def generate(photos: Sequence[Path], backgrounds: Sequence[Path], out: Path, count: int, seed: int = 0,
             matte: Callable[[bytes], np.ndarray] | None = None) -> list[Composite]:
    """``count`` composites: object photos (tried in an order ``seed`` picks, skipping those
    without a usable object) pasted onto backgrounds ``seed`` picks (never the object's own
    photo). Writes ``out/images/*.jpg``, ``out/masks/*.png`` (0/255) and ``out/composites.json``."""
    matte = matte or reference_matte()
    rng = random.Random(seed)
    pool, backs = sorted(set(map(Path, photos))), sorted(set(map(Path, backgrounds)))
    rng.shuffle(pool)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    made: list[Composite] = []
    for source in pool:
        if len(made) == count:
            break
        data = source.read_bytes()
        core = object_core(matte(data))
        if core is None:
            continue
        photo = np.asarray(Image.open(source).convert("RGB"))
        back_path = rng.choice([b for b in backs if b.resolve() != source.resolve()])
        background = np.asarray(Image.open(back_path).convert("RGB"))
        name = f"{len(made) + 1:04d}_{source.stem}_on_{back_path.stem}"
        image = composite(photo, core, background)
        Image.fromarray(image).save(out / "images" / f"{name}.jpg", quality=QUALITY)
        Image.fromarray(core.astype(np.uint8) * 255).save(out / "masks" / f"{name}.png")
        made.append(Composite(name, image, core, source.name, back_path.name))
    if len(made) < count:
        raise ValueError(f"{count} composites asked for, only {len(made)} of the {len(pool)} photos hold a usable "
                         f"object (core matte >= {CORE} on {MIN_FRACTION:.0%} to {MAX_FRACTION:.0%} of the photo)")
    (out / "composites.json").write_text(json.dumps(
        {"description": "objects cut out by the reference's confident matte core, pasted onto other photos "
                        "(harness.segmentation.data)", "seed": seed, "core": CORE,
         "composites": [{"name": c.name, "object": c.source, "background": c.background,
                         "object_fraction": round(float(c.mask.mean()), 4)} for c in made]}, indent=1) + "\n")
    return made


def _photo_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.segmentation.data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="paste objects cut out of photos onto others; write images and masks")
    gen.add_argument("photos", type=Path, help="folder of photos to cut objects out of (searched recursively)")
    gen.add_argument("backgrounds", type=Path, help="folder of photos to paste them onto (searched recursively)")
    gen.add_argument("out", type=Path)
    gen.add_argument("--count", type=COUNT, default=40)
    gen.add_argument("--seed", type=SEED, default=0)
    args = parser.parse_args(argv)
    for folder in (args.photos, args.backgrounds):
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
    made = generate(_photo_files(args.photos), _photo_files(args.backgrounds), args.out, args.count, args.seed)
    print(f"{args.out}: {len(made)} composites")
    return 0


if __name__ == "__main__":
    sys.exit(main())
