"""Build a model's TensorRT engine (model.plan) from its ONNX, with trtexec: the classifier's
(``--model classifier``, the default), or another task's engine (``--model embedder``,
``detector``, ``recognizer``, ``segmenter``).

Runs in the TensorRT image of the release in ``deploy/versions.toml`` (an engine only
loads in the TensorRT version that built it, on the GPU model it was built on); it
refuses to build when the image's TensorRT is not the manifest's. The engine gets one
optimization profile, batch 1 to the model's ``max_batch_size``; the input name and dims
come from ``<model>/engine_input.json``, which the harness writes from ``<model>/config.pbtxt``
with Triton's protobuf (this image has neither: harness/engine_input.py), so the engine always
matches what Triton will feed it; a config edited after it was written is refused.

A config dimension of -1 (the detector's ``[3, -1, -1]``: each image has its own input size)
takes its range from the spec the config names (its ``spec`` parameter, ``detection.toml``),
whose ``limit_side`` resize makes every input: the smallest is ``multiple`` x ``multiple``
(32x32), the largest ``max_side`` x ``max_side`` (what ``detect_validate_image`` lets through),
and TensorRT tunes for the input of a 640x480 (4:3) photo, the commonest camera aspect
(736x992 with ``limit_side_len`` 736, ``min``). Batch 1 to 8 (the detector's max_batch_size:
Triton batches only equal shapes, so batches form among photos of one size).
A width of -1 alone (the recognizer's ``[3, 48, -1]``: each word has its own width) takes its
range from the spec's ``[recognition]`` (``ocr.toml``): from ``width`` (every input is padded
to at least it), tuned for it, up to ``max_width``.

Precision: TensorRT 11 builds every network strongly typed and its trtexec has no
``--fp16`` (nor ``--int8``/``--best``): there, FP16=1 builds from ``model_fp16.onnx``, an
ONNX that is fp16 inside (``harness model export --fp16`` writes it). TensorRT 10 and
older get ``--fp16`` on the fp32 ONNX. Every build gets ``--noTF32``: trtexec enables TF32
by default ("default is to enable tf32, in addition to fp32", samples/common/sampleOptions.cpp
at tag v11.0), and on Ampere and later TF32 runs fp32 matrix products on 10-bit mantissas:
the gpu profile promises the ONNX's fp32 (and the fp16 model's fp32 layers stay fp32). The
stamp names the precision; ``harness preflight`` prints it.

Environment (docker-compose.yml sets them):
    FP16       1 for an fp16 engine (faster; logits move slightly); default 0
    OPT_BATCH  the batch size TensorRT tunes for (at most the model's max_batch_size); default 8
               (docker-compose.yml: 8 for the classifier, 1 for the detector)
    TRTEXEC    the trtexec binary; default trtexec on PATH, else /usr/src/tensorrt/bin/trtexec
               (a clean error, exit 2, when none of them is an executable file)

The build is skipped when ``<out>/model.plan`` was built from the same ONNX with the same
settings by the same TensorRT on the same GPU (a stamp file beside it records them).
A model deployed again under the same name has versions (Triton's version folders): ``--version 2``
builds ``2/model.onnx`` (harness.engine_input.version_file) into ``--out`` (mounted at the model's ``2/``).

``--dry-run`` prints the trtexec command and builds nothing (tests/test_compose.py checks its
flags against TensorRT 11's trtexec). Standard library only (the
TensorRT image has no project packages: it imports harness.manifest from the checkout).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# The project's root: in the TensorRT image docker-compose.yml mounts docker/, harness/ and
# deploy/ under /opt/project as in this checkout. harness.manifest is standard library only.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.engine_input import EngineInputError, read_engine_input, version_file  # noqa: E402
from harness.manifest import MANIFEST_PATH, load_manifest, same_version, tensorrt_library_version  # noqa: E402

ENGINE = "model.plan"
STAMP = "model.plan.stamp.json"
FP16_ONNX = "model_fp16.onnx"
TRTEXEC_IN_IMAGE = "/usr/src/tensorrt/bin/trtexec"
"""Where the TensorRT image keeps trtexec when it is not on PATH."""
NO_TF32 = "--noTF32"


PROFILE_PHOTO = (480, 640)
"""(height, width) of the photo a dynamic-size profile is tuned for: 4:3 landscape, VGA."""


def limit_side_profile(spec_path: Path) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(height, width) of the smallest, the optimal and the largest model input of a
    ``limit_side`` detector, from its spec's ``[resize]``: ``multiple`` square, the input of a
    :data:`PROFILE_PHOTO` (rapidocr's arithmetic: the ratio in float64, sides truncated, then
    rounded to the multiple; tests hold it to harness.geometry), ``max_side`` square.

    Read with harness.spec's own reader and defaults (standard library only): ``load_spec``
    also builds the postprocessor, which imports numpy, OpenCV and pyclipper, and the TensorRT
    image has none of them."""
    from harness.spec import ResizeSpec, SpecError, _read_with_extends

    keys = ("mode", "limit_side_len", "limit_type", "multiple", "max_side")
    try:
        table = _read_with_extends(spec_path, ())
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    r = ResizeSpec(**{k: v for k, v in table.get("resize", {}).items() if k in keys})
    if r.mode != "limit_side":
        raise ValueError(f"{spec_path}: resize.mode is {r.mode!r}: only a limit_side resize makes inputs of -1 x -1")
    height, width = PROFILE_PHOTO
    if r.limit_type == "max":
        ratio = r.limit_side_len / max(height, width) if max(height, width) > r.limit_side_len else 1.0
    else:
        ratio = r.limit_side_len / min(height, width) if min(height, width) < r.limit_side_len else 1.0
    optimal = tuple(int(round(int(side * ratio) / r.multiple) * r.multiple) for side in (height, width))
    return (r.multiple, r.multiple), optimal, (r.max_side, r.max_side)


def recognition_profile(spec_path: Path) -> tuple[tuple[int], tuple[int], tuple[int]]:
    """(width,) of the smallest, the optimal and the largest input of the recognizer, from its
    spec's ``[recognition]``: ``width`` (inputs are padded to at least it; the commonest too), up
    to ``max_width``. Read with harness.spec's own reader and harness.ocr.recognition's defaults
    (standard library and numpy-free reading only)."""
    from harness.spec import SpecError, _read_with_extends

    try:
        table = _read_with_extends(spec_path, ())
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    if "recognition" not in table:
        raise ValueError(f"{spec_path}: no [recognition] table: nothing says the recognizer's widths")
    recognition = table["recognition"]
    width, max_width = int(recognition.get("width", 320)), int(recognition.get("max_width", 1280))
    return (width,), (width,), (max_width,)


def trtexec_command(trtexec: str, onnx: Path, engine: Path, input_name: str, dims: list[int],
                    max_batch: int, opt_batch: int, fp16: bool, tensorrt_major: int,
                    sides: tuple[tuple[int, int], ...] | None = None) -> list[str]:
    """The trtexec call: one profile with batch 1 .. max_batch, tuned for opt_batch.

    ``sides``: for an input with -1 dimensions, their values in the profile's smallest, optimal
    and largest shapes: the detector's (height, width) (:func:`limit_side_profile`), the
    recognizer's (width,) (:func:`recognition_profile`).
    With ``fp16`` under TensorRT 11+, ``onnx`` must be the fp16 model: precision comes
    from the network, and the flag no longer exists."""
    if (-1 in dims) != (sides is not None) or any(len(side) != dims.count(-1) for side in sides or ()):
        raise ValueError(f"input dims {dims}: each -1 needs the profile's values, and only they")

    def shape(batch: int, which: int) -> str:
        size = iter(sides[which]) if sides else iter(())
        return f"{input_name}:" + "x".join(str(d) for d in [batch, *(next(size) if d == -1 else d for d in dims)])

    cmd = [trtexec, f"--onnx={onnx}", f"--saveEngine={engine}",
           f"--minShapes={shape(1, 0)}", f"--optShapes={shape(min(opt_batch, max_batch), 1)}",
           f"--maxShapes={shape(max_batch, 2)}",
           "--skipInference"]  # build and save only; Triton serves it
    if fp16 and tensorrt_major < 11:
        cmd.append("--fp16")
    cmd.append(NO_TF32)  # fp32 layers in fp32, not TF32 (on by default)
    return cmd


def precision(fp16: bool, tensorrt_major: int) -> str:
    """The precision an engine of :func:`trtexec_command` is built in, as the stamp names it."""
    if not fp16:
        return "fp32 (TF32 off)"
    how = "strongly typed from model_fp16.onnx" if tensorrt_major >= 11 else "--fp16"
    return f"fp16 ({how}; fp32 layers TF32 off)"


def engine_stamp(onnx: Path, cmd: list[str], gpu: str, tensorrt: str, built_precision: str) -> dict:
    """What the stamp beside model.plan records: a build with the same stamp is not redone,
    and ``harness preflight`` reads its TensorRT, GPU and precision."""
    return {"onnx_sha256": hashlib.sha256(onnx.read_bytes()).hexdigest(), "gpu": gpu, "tensorrt": tensorrt,
            "precision": built_precision, "command": cmd[3:]}  # shapes and precision; the paths do not matter


def find_trtexec() -> tuple[str, str | None]:
    """(what was looked for, the executable found or None): ``$TRTEXEC``, else trtexec on
    PATH, else the TensorRT image's own."""
    given = os.environ.get("TRTEXEC")
    if given:
        return f"TRTEXEC={given}", shutil.which(given)
    return f"trtexec on PATH or at {TRTEXEC_IN_IMAGE}", shutil.which("trtexec") or shutil.which(TRTEXEC_IN_IMAGE)


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
    parser.add_argument("--model", default="classifier",
                        help="the model folder whose engine to build: each task's engine (classifier, embedder, "
                             "detector, recognizer, segmenter) (default: %(default)s)")
    parser.add_argument("--version", type=int, default=1,
                        help="the model's version whose engine to build: version 1's ONNX sits beside its config, a later "
                             "one's in its version folder (2/model.onnx) (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("/engine"),
                        help="directory for model.plan (default: %(default)s)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST_PATH,
                        help="the production manifest, deploy/versions.toml (default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the trtexec command, build nothing")
    args = parser.parse_args(argv)

    manifest = load_manifest(args.manifest)
    tensorrt, major = manifest.tensorrt.version, manifest.tensorrt_major
    fp16 = os.environ.get("FP16", "0").strip().lower() in ("1", "true", "yes", "on")
    model_dir = args.repository / args.model
    try:
        onnx = version_file(model_dir, args.version, FP16_ONNX if fp16 and major >= 11 else "model.onnx")
    except EngineInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not onnx.is_file():
        how = "harness model export --fp16" if onnx.name == FP16_ONNX else "`make setup` or `harness model export`"
        if onnx.name == FP16_ONNX and args.model != "classifier":
            how += f" writes the classifier's only: build the {args.model} with FP16=0"
        print(f"error: {onnx} not found: export it first ({how})", file=sys.stderr)
        return 2
    try:
        model_input = read_engine_input(model_dir)
    except EngineInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    max_batch, input_name, dims = model_input.max_batch_size, model_input.name, list(model_input.dims)
    sides = None
    if -1 in dims:
        spec_path = args.repository / (model_input.spec or "preprocessing.toml")
        try:
            sides = limit_side_profile(spec_path) if dims.count(-1) == 2 else recognition_profile(spec_path)
        except ValueError as exc:
            print(f"error: the {args.model}'s input is {dims}: {exc}", file=sys.stderr)
            return 2
    opt_batch = int(os.environ.get("OPT_BATCH", "8"))
    looked_for, trtexec = find_trtexec()

    engine = args.out / ENGINE
    partial = args.out / (ENGINE + ".partial")  # trtexec writes here; renamed only when complete
    cmd = trtexec_command(trtexec or os.environ.get("TRTEXEC") or "trtexec", onnx, partial, input_name, dims,
                          max_batch, opt_batch, fp16, major, sides)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    if trtexec is None:
        print(f"error: no trtexec executable ({looked_for}): run this in the TensorRT image deploy/versions.toml "
              f"names ({manifest.tensorrt.image})", file=sys.stderr)
        return 2
    found = tensorrt_library_version()
    if found is None or not same_version(tensorrt, found):
        print(f"error: this image's TensorRT is {found or 'missing'}, the manifest's is {tensorrt}: an engine only "
              f"loads in the TensorRT that built it (use the image deploy/versions.toml names)", file=sys.stderr)
        return 2

    stamp = engine_stamp(onnx, cmd, gpu_name(), found, precision(fp16, major))
    stamp_file = args.out / STAMP
    if engine.is_file() and stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp:
        print(f"{engine} is up to date ({stamp['gpu']}, {stamp['precision']}); not rebuilt")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"building {engine} on {stamp['gpu']}, {stamp['precision']}: {' '.join(cmd)}", flush=True)
    try:
        result = subprocess.run(cmd)
    except OSError as exc:  # found, but not runnable here (another architecture, a broken link)
        print(f"error: cannot run {trtexec}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if result.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        print(f"error: trtexec failed (exit code {result.returncode})", file=sys.stderr)
        return 1
    partial.replace(engine)
    stamp_file.write_text(json.dumps(stamp, indent=2) + "\n")
    print(f"built {engine} ({engine.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
