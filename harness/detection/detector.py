"""The reference text detector: PP-OCRv6's small DBNet detector as the ``rapidocr`` wheel
ships it (``rapidocr/models/PP-OCRv6_det_small.onnx``, Apache-2.0, weights by Baidu /
PaddleOCR), run in ONNX Runtime in this process with rapidocr's preprocessing replayed:

BGR image (PaddleOCR trains on ``cv2.imread``'s order) -> :class:`LimitSide` resize
(``cv2.resize`` bilinear) -> ``x / 255`` -> ``(x - 0.5) / 0.5`` -> NCHW float32 -> the
probability map ``[1, 1, H, W]`` -> :class:`DbPostprocess`.

The model's licence notice travels with the model: :func:`install_model` copies
``MODEL_LICENSES.md`` and the Apache ``LICENSE`` beside any copy, after checking the file is
the one the notice names (its SHA-256).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from harness.detection.boxes import Detections
from harness.detection.db import DbParams, DbPostprocess
from harness.geometry import Geometry, LimitSide, resize_opencv

MODEL_NAME = "PP-OCRv6_det_small.onnx"
MODEL_SHA256 = "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f"
"""As rapidocr 3.10.0's ``MODEL_LICENSES.md`` and ``default_models.yaml`` record it."""
LICENSE_FILES = ("MODEL_LICENSES.md", "LICENSE")
"""The notice files of the rapidocr distribution that go with every copy of the model."""
INPUT_NAME = "x"
OUTPUT_NAME = "fetch_name_0"
MEAN = STD = 0.5


def model_path(name: str = MODEL_NAME) -> Path:
    """The ONNX file inside the installed rapidocr wheel (the detector's, or ``name``: the recognizer's)."""
    import rapidocr

    path = Path(rapidocr.__file__).parent / "models" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: install rapidocr==3.10.0 (pinned in requirements.lock)")
    return path


def license_files() -> list[Path]:
    """The rapidocr distribution's licence and model notice (from its dist-info)."""
    dist = importlib.metadata.distribution("rapidocr")
    found = {Path(str(f)).name: Path(dist.locate_file(f)) for f in dist.files or () if Path(str(f)).name in LICENSE_FILES}
    missing = [name for name in LICENSE_FILES if name not in found]
    if missing:
        raise FileNotFoundError(f"rapidocr's {', '.join(missing)} not found in its dist-info")
    return [found[name] for name in LICENSE_FILES]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_model(directory: Path, filename: str = "model.onnx", name: str = MODEL_NAME,
                  expected: str = MODEL_SHA256) -> Path:
    """Copy the detector (or the wheel's model ``name`` whose SHA-256 the notice records as
    ``expected``) into ``directory`` as ``filename``, with its licence notice beside it
    (``MODEL_LICENSES.md``, ``LICENSE``); refuses a model file that is not the one the
    notice covers."""
    source = model_path(name)
    if (digest := sha256(source)) != expected:
        raise ValueError(f"{source} has SHA-256 {digest}, not the {expected} its licence notice covers")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / filename
    shutil.copyfile(source, target)
    for notice in license_files():
        shutil.copyfile(notice, directory / notice.name)
    return target


def to_input(image_bgr: np.ndarray, resize: LimitSide) -> tuple[np.ndarray, Geometry]:
    """rapidocr's ``DetPreProcess``: HWC uint8 BGR -> ([1, 3, H, W] float32, geometry)."""
    resized, geometry = resize_opencv(image_bgr, resize)
    # rapidocr's arithmetic to the bit: x * (1/255) in float32, then mean and std in float64
    scaled = resized.astype(np.float32) * np.float32(1 / 255.0)
    chw = ((scaled - np.full(3, MEAN)) / np.full(3, STD)).transpose(2, 0, 1)
    return chw[None].astype(np.float32), geometry


@dataclass(frozen=True)
class DetectorResult:
    probability: np.ndarray
    """[1, 1, H, W] raw model output (the ``output`` stage)."""
    geometry: Geometry
    detections: Detections
    """The ``postprocess`` stage, in the source image's pixels."""


class TextDetector:
    """The reference detector (one ONNX Runtime session, ``threads`` intra-op threads)."""

    def __init__(self, resize: LimitSide = LimitSide(), postprocess: DbParams = DbParams(), threads: int = 1,
                 model: Path | None = None):
        self.resize = resize
        self.postprocess = DbPostprocess(postprocess)
        self.threads = threads
        self.model = model or model_path()

    @cached_property
    def session(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(self.model), options, providers=["CPUExecutionProvider"])

    def probability(self, tensor: np.ndarray) -> np.ndarray:
        """The model alone: [1, 3, H, W] input -> [1, 1, H, W] text probability."""
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(tensor, np.float32)})[0]

    def __call__(self, image_bgr: np.ndarray) -> DetectorResult:
        tensor, geometry = to_input(image_bgr, self.resize)
        prob = self.probability(tensor)
        return DetectorResult(prob, geometry, self.postprocess({OUTPUT_NAME: prob[0]}, geometry))
