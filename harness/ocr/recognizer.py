"""The reference text recognizer: PP-OCRv6's small recognizer as the ``rapidocr`` wheel ships it
(``rapidocr/models/PP-OCRv6_rec_small.onnx``, Apache-2.0, weights by Baidu / PaddleOCR), run in
ONNX Runtime in this process, each word alone: input ``x`` [1, 3, 48, W], output
``fetch_name_0`` [1, W / 8, 18710] (per-step class probabilities).

:func:`install_model` copies it into the model repository with its licence notice (as the
detector's, :mod:`harness.detection.detector`) and writes its dictionary beside it.
"""

from __future__ import annotations

import shutil
from functools import cached_property
from pathlib import Path

import numpy as np

from harness.detection.detector import license_files, sha256
from harness.ocr.recognition import DICTIONARY_FILENAME, load_dictionary

MODEL_NAME = "PP-OCRv6_rec_small.onnx"
MODEL_SHA256 = "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884"
"""As rapidocr 3.10.0's ``MODEL_LICENSES.md`` records it."""
INPUT_NAME = "x"
OUTPUT_NAME = "fetch_name_0"
CLASSES = 18710
"""The blank, the 18,708 characters of its dictionary, a space."""


def model_path() -> Path:
    """The ONNX file inside the installed rapidocr wheel."""
    import rapidocr

    path = Path(rapidocr.__file__).parent / "models" / MODEL_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: install rapidocr==3.10.0 (pinned in requirements.lock)")
    return path


def install_model(directory: Path, filename: str = "model.onnx") -> Path:
    """Copy the recognizer into ``directory`` as ``filename`` with its licence notice
    (``MODEL_LICENSES.md``, ``LICENSE``) and its dictionary (``dictionary.txt``, from the ONNX's
    ``character`` metadata); refuses a model file that is not the one the notice covers."""
    source = model_path()
    if (digest := sha256(source)) != MODEL_SHA256:
        raise ValueError(f"{source} has SHA-256 {digest}, not the {MODEL_SHA256} its licence notice covers")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / filename
    shutil.copyfile(source, target)
    for notice in license_files():
        shutil.copyfile(notice, directory / notice.name)
    characters = load_dictionary(target)
    if len(characters) + 2 != CLASSES:
        raise ValueError(f"{target}: {len(characters)} characters in its dictionary, expected {CLASSES - 2}")
    (directory / DICTIONARY_FILENAME).write_text("\n".join(characters) + "\n", encoding="utf-8")
    return target


class TextRecognizer:
    """The reference recognizer (one ONNX Runtime session, ``threads`` intra-op threads)."""

    def __init__(self, model: Path | None = None, threads: int = 1):
        self.model = Path(model or model_path())
        self.threads = threads

    @cached_property
    def session(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(self.model), options, providers=["CPUExecutionProvider"])

    @cached_property
    def characters(self) -> list[str]:
        return load_dictionary(self.model)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """One word's input [3, 48, W] -> its per-step probabilities [steps, classes]."""
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(x[None], np.float32)})[0][0]
