"""What ``harness layers`` costs: every layer of two executions compared on N images, against a
plain forward pass of both executions (logits only) on the same images; and its peak memory
at two image counts (it must stay flat: one batch of activations is held, not all images).

    .venv/bin/python benchmarks/layers_cost.py [--images 50] [--executions onnx,onnx-fp16]

Prints the ratio (target <= 4x) and the peak RSS of a run on N/2 and N images, each in a fresh
process so one run's peak does not hide the other's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _images(n: int, out: Path) -> Path:
    from harness.paths import DEFAULT_PHOTOS

    photos = sorted(DEFAULT_PHOTOS.iterdir())
    out.mkdir(parents=True, exist_ok=True)
    for i in range(n):  # the corpus has 65 photos: repeat them when asked for more
        src = photos[i % len(photos)]
        target = out / f"{i:04d}_{src.name}"
        if target.is_symlink():  # a link leading outside the folder is not an input: hard links
            target.unlink()
        if not target.exists():
            os.link(src, target)
    return out


def measure(n: int, executions: list[str]) -> dict:
    """One run in this process: seconds of harness layers and of the plain passes, peak RSS."""
    import numpy as np

    from harness.layers.executions import LayerGraph
    from harness.layers.inputs import image_inputs
    from harness.layers.run import DEFAULT_BATCH, run_layers
    from harness.model import INPUT_NAME, LOGITS, onnx_session
    from harness.precision import export_fp16
    from harness.session import Session

    session = Session()
    recipe = session.recipe()
    with tempfile.TemporaryDirectory() as tmp:
        images = _images(n, Path(tmp) / "images")
        fp16 = export_fp16(session.onnx_path, Path(tmp) / "model_fp16.onnx")
        paths = {"onnx": session.onnx_path, "onnx-fp16": fp16, "onnx-noopt": session.onnx_path}
        # Plain: the same preprocessing, each execution's logits only, the same batch size.
        start = time.perf_counter()
        sessions = [onnx_session(paths[e]) for e in executions]
        failed: list = []
        batch: list = []
        for _, x in image_inputs(images, recipe, failed):
            batch.append(x)
            if len(batch) == DEFAULT_BATCH:
                for s in sessions:
                    s.run([LOGITS], {INPUT_NAME: np.stack(batch)})
                batch = []
        if batch:
            for s in sessions:
                s.run([LOGITS], {INPUT_NAME: np.stack(batch)})
        plain = time.perf_counter() - start
        start = time.perf_counter()
        result = run_layers(images, session.onnx_path, executions, recipe, fp16_path=fp16)
        layered = time.perf_counter() - start
    layers = len(LayerGraph.from_onnx(session.onnx_path).nodes)
    return {"images": result.images, "layers": layers, "plain_s": plain, "layers_s": layered,
            "ratio": layered / plain, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--executions", default="onnx,onnx-fp16")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    executions = args.executions.split(",")
    if args.one:
        print(json.dumps(measure(args.images, executions)))
        return
    rows = []
    for n in (args.images // 2, args.images):
        out = subprocess.run([sys.executable, __file__, "--one", "--images", str(n), "--executions", args.executions],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for r in rows:
        print(f"{r['images']:4d} images, {r['layers']} layers, {args.executions}: harness layers {r['layers_s']:.1f} s, "
              f"plain forward of both {r['plain_s']:.1f} s, ratio {r['ratio']:.2f}x (target <= 4x); "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    growth = rows[1]["peak_rss_mb"] / rows[0]["peak_rss_mb"]
    print(f"peak RSS {rows[0]['images']} -> {rows[1]['images']} images: x{growth:.2f} (flat: one batch held)")


if __name__ == "__main__":
    main()
