"""The ocr models' outputs by name, and the packing of one image's words into them.

Each word's crop, recognizer input and output has its own shape; a Triton output holds one
array per image, so the words' arrays travel padded to the largest (zeros) with their own
shapes beside them (:func:`pack_ragged`, :func:`unpack_ragged`). Numpy only: it runs in the server.
"""

from __future__ import annotations

import numpy as np

TEXTS = "TEXTS"
"""BYTES [words]: each word's text, UTF-8."""
TEXT_SCORES = "TEXT_SCORES"
"""FP32 [words]: each word's CTC confidence (the mean of its kept steps' probabilities)."""
WORDS_KEPT = "WORDS_KEPT"
"""BOOL [words]: asked for, an ocr model answers every word it read, and this says which of them
it keeps for its users (a text score of at least ``[recognition] text_score``); not asked, it
answers the kept words only, as rapidocr does."""
WORDS_UNREAD = "WORDS_UNREAD"
"""INT32 [1]: the boxes the detector found whose words were not read (beyond the spec's
``[recognition] max_words``): left out of BOXES, SCORES and TEXTS."""
WORD_TAPS = {"crop": ("WORD_CROPS", "WORD_CROP_SHAPES"), "input": ("WORD_INPUTS", "WORD_INPUT_SHAPES"),
             "output": ("WORD_OUTPUTS", "WORD_OUTPUT_SHAPES")}
"""Word stage -> (the padded arrays, their shapes): asked for only by the harness."""


def pack_ragged(arrays: list[np.ndarray], least: tuple[int, ...], dtype) -> tuple[np.ndarray, np.ndarray]:
    """``arrays`` -> (one array [len, *largest] zero-padded, shapes [len, ndim] int32); ``least``:
    the padded shape's least extent per axis (a config's fixed dimensions: an image without
    words answers [0, 3, 48, 0] inputs)."""
    shapes = np.array([a.shape for a in arrays], np.int32).reshape(len(arrays), len(least))
    largest = np.maximum(shapes.max(axis=0) if len(arrays) else 0, least)
    out = np.zeros((len(arrays), *largest), dtype)
    for i, a in enumerate(arrays):
        out[(i, *(slice(0, n) for n in a.shape))] = a
    return out, shapes


def unpack_ragged(padded: np.ndarray, shapes: np.ndarray) -> list[np.ndarray]:
    """The arrays :func:`pack_ragged` packed (ValueError when a shape does not fit the padded array)."""
    padded = np.asarray(padded)
    shapes = np.asarray(shapes).reshape(-1, max(padded.ndim - 1, 1))
    if len(shapes) != len(padded):
        raise ValueError(f"{len(shapes)} word shapes for {len(padded)} words")
    out = []
    for i, shape in enumerate(shapes):
        if len(shape) != padded.ndim - 1 or any(n < 0 or n > m for n, m in zip(shape, padded.shape[1:])):
            raise ValueError(f"word {i}'s shape {list(shape)} does not fit the padded {list(padded.shape[1:])}")
        out.append(padded[(i, *(slice(0, int(n)) for n in shape))])
    return out


def decode_texts(values) -> list[str]:
    """BYTES texts as str (ValueError naming the word whose bytes are not UTF-8)."""
    out = []
    for i, value in enumerate(np.asarray(values, dtype=object).reshape(-1)):
        if isinstance(value, str):
            out.append(value)
            continue
        try:
            out.append(bytes(value).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"text {i} is not UTF-8 ({exc.reason} at byte {exc.start}: {bytes(value)[:40]!r})") from None
    return out
