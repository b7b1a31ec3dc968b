"""What the OCR check costs against its parts, and what each planted cause does to the words, in one run.

On words rendered onto real photos (``harness.detection.data``, seed 0, plus one photo turned a
quarter so that its words stand upright), against one embedded server (cpu profile, the
detector at limit side 320: ``specs/ocr/small.toml``):

- cost: ``check --task ocr`` against its parts, each timed as a user runs it: ``check --task
  detection`` on the same photos (the detection stages the OCR check compares too), the
  server's ``ocr_dali`` answer of every photo with its word stages (what the deployment does
  beyond detection), and the reference reading the words of its own boxes (what the reference
  does beyond detection). Rounds alternate; medians. Target: at most 1.3x.
- effect: word agreement, character error rate and the word stage each planted cause
  (``specs/ocr/planted/``) fails at, against the aligned spec.

    .venv/bin/python benchmarks/ocr_cost.py [--rounds 3] [--photos 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from harness.paths import PROJECT_ROOT  # noqa: E402

TARGET = 1.3
SPECS = PROJECT_ROOT / "specs"
SMALL = SPECS / "ocr" / "small.toml"
SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
PHOTOS = ("n01530575_brambling.JPEG", "n01955084_chiton.JPEG", "n02328150_Angora.JPEG", "n03447447_gondola.JPEG",
          "n04070727_refrigerator.JPEG", "n02791270_barbershop.JPEG")
MODELS = ["ocr_dali", "ocr_opencv", "ocr_dali_taps", "ocr_opencv_taps", "detect_dali", "detect_opencv",
          "ocr_decode_dali", "ocr_preprocess_dali",
          "recognizer"]


def photos(out: Path, count: int) -> Path:
    from harness.detection.data import generate

    labels = generate([SAMPLE / name for name in PHOTOS[:count]], out, count, seed=0)
    images = labels.parent / "images"
    first = sorted(images.glob("*.jpg"))[0]
    cv2.imwrite(str(images / "9999_turned.jpg"), cv2.rotate(cv2.imread(str(first)), cv2.ROTATE_90_CLOCKWISE),
                [cv2.IMWRITE_JPEG_QUALITY, 95])
    return images


def cli(url: str, *args) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", *map(str, args), "--url", url], capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode


def server_part(url: str, images: list[Path]) -> float:
    """ocr_dali_taps's answer of every photo with its word stages: the deployment's work beyond detection."""
    from harness.client import TritonClient
    from harness.ocr.tensors import TEXT_SCORES, TEXTS, WORD_TAPS
    from harness.packing import pack_images

    client = TritonClient(url, "grpc")
    names = ["BOXES", "SCORES", TEXTS, TEXT_SCORES, *(n for pair in WORD_TAPS.values() for n in pair)]
    start = time.perf_counter()
    for path in images:
        client.infer("ocr_dali_taps", {"IMAGE": pack_images([path.read_bytes()])}, names)
    return time.perf_counter() - start


def reference_part(images: list[Path]) -> float:
    """The reference reading the words of its own boxes (the recognizer in this process)."""
    from harness.detection.detector import TextDetector
    from harness.geometry import LimitSide
    from harness.ocr.recognition import parameters
    from harness.spec import load_spec
    from harness.task.ocr import Ocr

    spec = load_spec(SMALL)
    detector = TextDetector(LimitSide(320, "max"))
    task = Ocr().configure(spec)
    boxes = {p: detector(cv2.imread(str(p))).detections.quads for p in images}  # not counted: detection's part
    p = parameters(spec.recognition)
    task.recognizer.session  # noqa: B018 - loaded before timing
    start = time.perf_counter()
    for path in images:
        task.read_words(cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB), np.asarray(boxes[path]), p)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--photos", type=int, default=4)
    args = parser.parse_args()
    from harness.repository import build_cpu_profile
    from harness.server import TritonServer, free_port

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        images_dir = photos(tmp / "words", args.photos)
        images = sorted(images_dir.glob("*.jpg"))
        profile = build_cpu_profile(PROJECT_ROOT / "model_repository", tmp / "repository",
                                    {"detection.toml": SPECS / "detection" / "small.toml", "ocr.toml": SMALL})
        with TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=MODELS) as server:
            url = server.grpc_url
            ocr = ("check", images_dir, "--task", "ocr", "--spec", SMALL, "--report", tmp / "ocr")
            detection = ("check", images_dir, "--task", "detection", "--spec", SPECS / "detection" / "small.toml",
                         "--report", tmp / "detection")
            cli(url, *ocr), cli(url, *detection)  # warm-up, uncounted
            times = {"ocr check": [], "detection check": [], "server words": [], "reference words": []}
            for k in range(args.rounds):
                steps = [("ocr check", lambda: cli(url, *ocr)[0]), ("detection check", lambda: cli(url, *detection)[0]),
                         ("server words", lambda: server_part(url, images)), ("reference words", lambda: reference_part(images))]
                for name, run in steps[k % len(steps):] + steps[:k % len(steps)]:
                    times[name].append(run())
            median = {name: statistics.median(values) for name, values in times.items()}
            parts = median["detection check"] + median["server words"] + median["reference words"]
            print(f"{len(images)} photos, {args.rounds} rounds (medians, s): " +
                  ", ".join(f"{name} {value:.2f}" for name, value in median.items()))
            print(f"OCR check / its parts (detection check + server words + reference words): "
                  f"{median['ocr check'] / parts:.2f}x (target {TARGET}x)")
            print("\nspec | exit | words read alike | CER | word culprits")
            for spec in [SMALL, *sorted((SPECS / "ocr" / "planted").glob("*.toml"))]:
                _, code = cli(url, "check", images_dir, "--task", "ocr", "--spec", spec, "--report", tmp / "plant")
                f = json.loads((tmp / "plant" / "report.json").read_text())["task_figures"]
                print(f"{spec.stem} | {code} | {f['words_exact']} / {f['words_matched']} | {f['cer']:.4f} | "
                      f"{f['word_culprits'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
