"""How far DALI's resize is from PIL's, with DALI's own resampling and with PIL's replayed.

For every photo of the folders given, the resize stage of the DALI graph (CPU kernels, the
very step the served models run: :class:`harness.preprocessing.dali_graph.CpuStageRunner`)
against PIL's ``Image.resize`` of the same decoded image, for each interpolation PIL and DALI
share (bilinear, bicubic, Lanczos), with ``resize.resampling = "auto"`` (``fn.resize`` as it
is: the edge pixel repeated, float between the passes) and ``"pil"`` (PIL's edges and 8-bit
passes in Pillow's order replayed: :mod:`harness.preprocessing.dali_pil`). Printed per
interpolation and resampling: the largest difference in levels over every photo, how many
photos reach it, the mean difference, and the share of values more than one level off, inside
the 2-pixel frame at the image's edge and away from it.

    .venv/bin/python benchmarks/pil_resize.py DIR [DIR ...] [--size 320 320] [--mode stretch]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.preprocessing.dali_graph import CpuStageRunner  # noqa: E402
from harness.spec import Preprocess, ResizeSpec  # noqa: E402
from harness.stage import Stage  # noqa: E402

PIL_FILTERS = {"linear": "BILINEAR", "cubic": "BICUBIC", "lanczos": "LANCZOS"}
FRAME = 2
SUFFIXES = (".jpg", ".jpeg", ".png")


def measure(photos: list[Path], mode: str, size: list[int]) -> list[str]:
    from PIL import Image

    images = [np.asarray(Image.open(p).convert("RGB")) for p in photos]
    lines = ["| interpolation | resampling | max (photos at it) | mean | > 1 level in the frame | > 1 level inside |",
             "|---|---|---|---|---|---|"]
    for interpolation, pil_filter in PIL_FILTERS.items():
        for resampling in ("auto", "pil"):
            resize = ResizeSpec(mode=mode, size=tuple(size), interpolation=interpolation, antialias=True,
                                resampling=resampling)
            runner = CpuStageRunner(Preprocess(resize=resize))
            worst, at_worst, total, count, frame_over, frame_n, inside_over, inside_n = 0.0, 0, 0.0, 0, 0, 0, 0, 0
            for image in images:
                ours = runner.run(Stage.RESIZE, image).astype(np.float64)
                height, width = resize.output_size(*image.shape[:2])
                pil = np.asarray(Image.fromarray(image).resize((width, height), getattr(Image, pil_filter)),
                                 np.float64)
                diff = np.abs(ours - pil)
                inside = np.zeros(diff.shape[:2], bool)
                inside[FRAME:-FRAME, FRAME:-FRAME] = True
                top = float(diff.max())
                worst, at_worst = (top, 1) if top > worst else (worst, at_worst + (top == worst))
                total, count = total + float(diff.sum()), count + diff.size
                frame_over += int((diff[~inside] > 1).sum())
                frame_n += diff[~inside].size
                inside_over += int((diff[inside] > 1).sum())
                inside_n += diff[inside].size
            lines.append(f"| {interpolation} | {resampling} | {worst:.0f} ({at_worst}) | {total / count:.4f} | "
                         f"{frame_over / max(frame_n, 1):.2%} | {inside_over / max(inside_n, 1):.4%} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--mode", default="stretch", choices=("stretch", "shorter_side"))
    parser.add_argument("--size", nargs="+", type=int, default=[320, 320])
    parser.add_argument("--limit", type=int, default=0, help="at most this many photos of each folder (0: all)")
    args = parser.parse_args(argv)
    photos = []
    for folder in args.folders:
        found = sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES) if folder.is_dir() else [folder]
        photos += found[:args.limit] if args.limit else found
    print(f"{len(photos)} photos, {args.mode} {args.size}, DALI CPU against PIL")
    print("\n".join(measure(photos, args.mode, args.size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
