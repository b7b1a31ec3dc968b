"""Build the classifier's TensorRT engine (model.plan) from its ONNX, with trtexec.

Runs in the TensorRT image of the release in ``deploy/versions.toml`` (an engine only
loads in the TensorRT version that built it, on the GPU model it was built on); it
refuses to build when the image's TensorRT is not the manifest's. The engine gets one
dynamic-batch optimization profile, batch 1 to the classifier's ``max_batch_size``; the
input name and dims come from ``classifier/config.pbtxt`` so the engine always matches
what Triton will feed it.

Precision: TensorRT 11 builds every network strongly typed and its trtexec has no
``--fp16`` (nor ``--int8``/``--best``): there, FP16=1 builds from ``model_fp16.onnx``, an
ONNX that is fp16 inside (``harness model export --fp16`` writes it). TensorRT 10 and
older get ``--fp16`` on the fp32 ONNX.

Environment (docker-compose.yml sets them):
    FP16       1 for an fp16 engine (faster; logits move slightly); default 0
    OPT_BATCH  the batch size TensorRT tunes for; default 8
    TRTEXEC    the trtexec binary; default trtexec on PATH, else /usr/src/tensorrt/bin/trtexec

The build is skipped when ``<out>/model.plan`` was built from the same ONNX with the same
settings by the same TensorRT on the same GPU (a stamp file beside it records them).
``--dry-run`` prints the trtexec command and builds nothing. Standard library only (the
TensorRT image has no project packages: it imports harness.manifest from the checkout).
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

# The project's root: in the TensorRT image docker-compose.yml mounts docker/, harness/ and
# deploy/ under /opt/project as in this checkout. harness.manifest is standard library only.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.manifest import MANIFEST_PATH, load_manifest, same_version, tensorrt_library_version  # noqa: E402

ENGINE = "model.plan"
STAMP = "model.plan.stamp.json"
FP16_ONNX = "model_fp16.onnx"


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
                    max_batch: int, opt_batch: int, fp16: bool, tensorrt_major: int) -> list[str]:
    """The trtexec call: one profile with batch 1 .. max_batch, tuned for opt_batch.

    With ``fp16`` under TensorRT 11+, ``onnx`` must be the fp16 model: precision comes
    from the network, and the flag no longer exists."""
    def shape(batch: int) -> str:
        return f"{input_name}:" + "x".join(str(d) for d in [batch, *dims])

    cmd = [trtexec, f"--onnx={onnx}", f"--saveEngine={engine}",
           f"--minShapes={shape(1)}", f"--optShapes={shape(min(opt_batch, max_batch))}",
           f"--maxShapes={shape(max_batch)}",
           "--skipInference"]  # build and save only; Triton serves it
    if fp16 and tensorrt_major < 11:
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
    parser.add_argument("--manifest", type=Path, default=MANIFEST_PATH,
                        help="the production manifest, deploy/versions.toml (default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the trtexec command, build nothing")
    args = parser.parse_args(argv)

    manifest = load_manifest(args.manifest)
    tensorrt, major = manifest.tensorrt.version, manifest.tensorrt_major
    fp16 = os.environ.get("FP16", "0").strip().lower() in ("1", "true", "yes", "on")
    classifier = args.repository / "classifier"
    onnx = classifier / (FP16_ONNX if fp16 and major >= 11 else "model.onnx")
    if not onnx.is_file():
        how = "harness model export --fp16" if onnx.name == FP16_ONNX else "`make setup` or `harness model export`"
        print(f"error: {onnx} not found: export it first ({how})", file=sys.stderr)
        return 2
    max_batch, input_name, dims = classifier_input((classifier / "config.pbtxt").read_text())
    opt_batch = int(os.environ.get("OPT_BATCH", "8"))
    trtexec = os.environ.get("TRTEXEC") or shutil.which("trtexec") or "/usr/src/tensorrt/bin/trtexec"

    engine = args.out / ENGINE
    partial = args.out / (ENGINE + ".partial")  # trtexec writes here; renamed only when complete
    cmd = trtexec_command(trtexec, onnx, partial, input_name, dims, max_batch, opt_batch, fp16, major)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    found = tensorrt_library_version()
    if found is None or not same_version(tensorrt, found):
        print(f"error: this image's TensorRT is {found or 'missing'}, the manifest's is {tensorrt}: an engine only "
              f"loads in the TensorRT that built it (use the image deploy/versions.toml names)", file=sys.stderr)
        return 2

    stamp = {"onnx_sha256": hashlib.sha256(onnx.read_bytes()).hexdigest(), "gpu": gpu_name(), "tensorrt": found,
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
