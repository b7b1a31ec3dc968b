"""Build the classifier's TensorRT engine (model.plan) from its ONNX, with trtexec.

Runs in the TensorRT image of the same release as the Triton image (an engine only loads
in the TensorRT version that built it, on the GPU model it was built on). The engine
gets one dynamic-batch optimization profile, batch 1 to the classifier's
``max_batch_size``; the input name and dims come from ``classifier/config.pbtxt`` so the
engine always matches what Triton will feed it.

Environment (docker-compose.yml sets them):
    FP16       1 to let TensorRT use fp16 kernels (faster; logits move slightly); default 0
    OPT_BATCH  the batch size TensorRT tunes for; default 8
    TRTEXEC    the trtexec binary; default trtexec on PATH, else /usr/src/tensorrt/bin/trtexec

The build is skipped when ``<out>/model.plan`` was built from the same ONNX with the same
settings on the same GPU (a stamp file beside it records them). ``--dry-run`` prints the
trtexec command and builds nothing. Standard library only (the TensorRT image has no
project packages).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ENGINE = "model.plan"
STAMP = "model.plan.stamp.json"


def classifier_input(config_text: str) -> tuple[int, str, list[int]]:
    """(max_batch_size, input name, input dims) from the classifier's config.pbtxt.

    A small reader for the one shape this config has (``input [ { name: ... dims: [...] } ]``);
    the project's tests check it against Triton's own protobuf parser."""
    max_batch = re.search(r"^\s*max_batch_size:\s*(\d+)", config_text, re.M)
    inputs = re.search(r"^\s*input\s*\[(.*?)\n\s*\]", config_text, re.M | re.S)
    if not max_batch or not inputs:
        raise ValueError("config.pbtxt has no max_batch_size or no input block")
    name = re.search(r'name:\s*"([^"]+)"', inputs.group(1))
    dims = re.search(r"dims:\s*\[([^\]]*)\]", inputs.group(1))
    if not name or not dims:
        raise ValueError("config.pbtxt input has no name or no dims")
    return int(max_batch.group(1)), name.group(1), [int(d) for d in dims.group(1).split(",")]


def trtexec_command(trtexec: str, onnx: Path, engine: Path, input_name: str, dims: list[int],
                    max_batch: int, opt_batch: int, fp16: bool) -> list[str]:
    """The trtexec call: one profile with batch 1 .. max_batch, tuned for opt_batch."""
    def shape(batch: int) -> str:
        return f"{input_name}:" + "x".join(str(d) for d in [batch, *dims])

    cmd = [trtexec, f"--onnx={onnx}", f"--saveEngine={engine}",
           f"--minShapes={shape(1)}", f"--optShapes={shape(min(opt_batch, max_batch))}",
           f"--maxShapes={shape(max_batch)}",
           "--skipInference"]  # build and save only; Triton serves it
    if fp16:
        cmd.append("--fp16")
    return cmd


def gpu_name() -> str:
    """The GPU the engine is built for (engines are specific to it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=Path("/models"),
                        help="the model repository (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("/engine"),
                        help="directory for model.plan (default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the trtexec command, build nothing")
    args = parser.parse_args(argv)

    classifier = args.repository / "classifier"
    onnx = classifier / "model.onnx"
    if not onnx.is_file():
        print(f"error: {onnx} not found: export it first (`make setup` or `harness model export`)", file=sys.stderr)
        return 2
    max_batch, input_name, dims = classifier_input((classifier / "config.pbtxt").read_text())
    fp16 = os.environ.get("FP16", "0").strip().lower() in ("1", "true", "yes", "on")
    opt_batch = int(os.environ.get("OPT_BATCH", "8"))
    trtexec = os.environ.get("TRTEXEC") or shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec"

    engine = args.out / ENGINE
    partial = args.out / (ENGINE + ".partial")  # trtexec writes here; renamed only when complete
    cmd = trtexec_command(trtexec, onnx, partial, input_name, dims, max_batch, opt_batch, fp16)
    if args.dry_run:
        print(" ".join(cmd))
        return 0

    stamp = {"onnx_sha256": hashlib.sha256(onnx.read_bytes()).hexdigest(), "gpu": gpu_name(),
             "command": cmd[3:]}  # shapes and precision; the paths do not matter
    stamp_file = args.out / STAMP
    if engine.is_file() and stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp:
        print(f"{engine} is up to date ({stamp['gpu']}, fp16={fp16}); not rebuilt")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"building {engine} on {stamp['gpu']}: {' '.join(cmd)}", flush=True)
    result = subprocess.run(cmd)
    if result.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        print(f"error: trtexec failed (exit code {result.returncode})", file=sys.stderr)
        return 1
    partial.replace(engine)
    stamp_file.write_text(json.dumps(stamp, indent=2) + "\n")
    print(f"built {engine} ({engine.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
