"""The reference text recognizer: PP-OCRv6's small recognizer as the ``rapidocr`` wheel ships it
(``rapidocr/models/PP-OCRv6_rec_small.onnx``, Apache-2.0, weights by Baidu / PaddleOCR), run in
ONNX Runtime in this process, each word alone: input ``x`` [1, 3, 48, W], output
``fetch_name_0`` [1, W / 8, 18710] (per-step class probabilities).

:func:`install_model` copies it into the model repository with its licence notice (as the
detector's, :mod:`harness.detection.detector`) and writes its dictionary beside it.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from harness.detection import detector
from harness.ocr.recognition import DICTIONARY_FILENAME, load_dictionary

MODEL_NAME = "PP-OCRv6_rec_small.onnx"
MODEL_SHA256 = "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884"
"""As rapidocr 3.10.0's ``MODEL_LICENSES.md`` records it."""
INPUT_NAME = "x"
OUTPUT_NAME = "fetch_name_0"
CLASSES = 18710
"""The blank, the 18,708 characters of its dictionary, a space."""


def install_model(directory: Path, filename: str = "model.onnx") -> Path:
    """Copy the recognizer into ``directory`` as ``filename`` with its licence notice (as the
    detector's: :func:`harness.detection.detector.install_model`) and its dictionary
    (``dictionary.txt``, from the ONNX's ``character`` metadata)."""
    target = detector.install_model(directory, filename, MODEL_NAME, MODEL_SHA256)
    characters = load_dictionary(target)
    if len(characters) + 2 != CLASSES:
        raise ValueError(f"{target}: {len(characters)} characters in its dictionary, expected {CLASSES - 2}")
    (directory / DICTIONARY_FILENAME).write_text("\n".join(characters) + "\n", encoding="utf-8")
    return target


class TextRecognizer:
    """The reference recognizer (one ONNX Runtime session, ``threads`` intra-op threads)."""

    def __init__(self, model: Path | None = None, threads: int = 1):
        self.model = Path(model or detector.model_path(MODEL_NAME))
        self.threads = threads

    @cached_property
    def session(self):
        from harness.model import onnx_session

        return onnx_session(self.model, self.threads)

    @cached_property
    def characters(self) -> list[str]:
        return load_dictionary(self.model)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """One word's input [3, 48, W] -> its per-step probabilities [steps, classes]."""
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(x[None], np.float32)})[0][0]
