"""PaddleOCR's text recognition, replayed from a spec's ``[recognition]`` table.

One box of the detector (a quad, x, y corners clockwise from the top left, in the photo's
pixels) becomes a word in four steps, each a stage the harness compares:

- ``crop``: the box cut out upright, a perspective warp or its bounding rectangle, turned a
  quarter when it stands tall (:mod:`harness.operations.word_crop`: the operation's keys,
  kernels, rotation rule and alternatives);
- ``input``: resized to ``height`` keeping the aspect ratio (``cv2.resize`` bilinear), the
  width capped at ``max_width``, ``x / 255``, ``(x - mean) / std`` in ``channel_order``,
  padded on the right with ``pad_value`` up to ``width`` (rapidocr's ``rec_img_shape``), and
  up to the widest word of its batch where ``batch`` is above 1 (rapidocr's and PaddleOCR's
  ``rec_batch_num``: an image's crops sorted by aspect ratio, ``batch`` at a time, so a word's
  input depends on its neighbours; 1: each crop alone, :func:`input_widths`);
- ``output``: the recognizer's per-step class probabilities [T, classes];
- ``text``: CTC greedy decoding with the model's own dictionary (the ONNX metadata
  ``character``; the blank at ``blank_index``, a space appended): argmax per step,
  repeats merged, blanks dropped; the score is the mean of the kept steps' probabilities
  (rapidocr's ``CTCLabelDecode``, 5 decimals). A word scoring below ``text_score`` is
  dropped, its box with it (rapidocr's ``filter_by_text_score``).

This module imports numpy and OpenCV only (and the spec, where it registers ``[recognition]``, and
the channel order's operation): it also runs inside the server (the ocr models).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness.operations import channels, resize_filter, word_crop
from harness.spec import register_table

DICTIONARY_FILENAME = "dictionary.txt"
"""The recognizer's dictionary, one character a line, written beside its ONNX by ``harness
model export`` from the ONNX metadata (the server reads it there: a TensorRT plan has no metadata)."""
METADATA_KEY = "character"


@dataclass(frozen=True)
class Recognition:
    """The ``[recognition]`` table: every parameter of the recognizer's preprocessing and decoding."""

    height: int = 48
    """The model's input height (fixed at 48 in PP-OCRv6's recognizer)."""
    width: int = 320
    """The input is padded up to at least this width (rapidocr's ``rec_img_shape`` [3, 48, 320])."""
    max_width: int = 1280
    """A crop resized wider than this is squeezed to it (the engine's optimization profile ends here)."""
    pad_value: float = 0.0
    """The padding's value, after normalization (PaddleOCR: zeros)."""
    pixel_range: float = 1.0
    """Pixels are divided by 255 / pixel_range before mean and std (1.0: x / 255)."""
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    channel_order: str = "BGR"
    """PaddleOCR trains on cv2's BGR images."""
    crop: str = word_crop.CROP.default
    """How a box is cut out (:mod:`harness.operations.word_crop`: the crop's kernels and its rotation rule)."""
    rotate_ratio: float = word_crop.ROTATE_RATIO.default
    """A crop at least this many times higher than wide is turned upright; 0: never."""
    blank_index: int = 0
    """Where CTC's blank sits in the class axis (the dictionary follows it)."""
    text_score: float = 0.5
    """A word whose score (:meth:`CtcDecoder.__call__`) is below this is dropped, its box with it
    (rapidocr's ``Global.text_score``, 0.5 by default); 0: every word is kept."""
    batch: int = 1
    """The words padded together: an image's crops sorted by aspect ratio, ``batch`` at a time, each
    padded to the widest of its batch (rapidocr's and PaddleOCR's ``rec_batch_num``, 6); 1: each crop
    alone, padded to ``width`` only (:func:`input_widths`)."""
    max_words: int = 256
    """The most boxes of one image whose words are read (:func:`words_read`): each costs a
    crop and a recognizer run (about 30 ms on a CPU core), so a page of 1,000 boxes is bounded;
    the others are left out and counted (the ocr models' ``WORDS_UNREAD``)."""

    def __post_init__(self):
        if self.crop not in word_crop.CROPS:
            raise ValueError(f"[recognition] crop must be one of {', '.join(word_crop.CROPS)}, got {self.crop!r}")
        if self.channel_order not in channels.ORDERS:
            raise ValueError(f"[recognition] channel_order must be one of {', '.join(channels.ORDERS)}, "
                             f"got {self.channel_order!r}")
        if not (0 < self.height <= self.width <= self.max_width):
            raise ValueError(f"[recognition] needs 0 < height <= width <= max_width, got {self.height}, {self.width}, "
                             f"{self.max_width}")
        if len(self.mean) != 3 or len(self.std) != 3 or not all(s > 0 for s in self.std):
            raise ValueError("[recognition] mean and std are three numbers each, std above 0")
        if self.rotate_ratio < 0 or self.blank_index < 0:
            raise ValueError("[recognition] rotate_ratio and blank_index are >= 0")
        if self.max_words < 1:
            raise ValueError(f"[recognition] max_words is at least 1, got {self.max_words}")
        if self.batch < 1:
            raise ValueError(f"[recognition] batch is at least 1 (1: each word alone), got {self.batch}")
        if not 0.0 <= self.text_score <= 1.0:
            raise ValueError(f"[recognition] text_score is a score from 0 to 1, got {self.text_score!r}")

    def keeps(self, score: float) -> bool:
        """Whether a word of this score is answered (rapidocr drops ``score < text_score``)."""
        return bool(score >= self.text_score)

    def to_table(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def parameters(table: Mapping[str, Any] | None) -> Recognition:
    """The record of a ``[recognition]`` table (ValueError on an unknown key or a bad value)."""
    table = dict(table or {})
    known = {f.name for f in fields(Recognition)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"[recognition] unknown key(s) {unknown}; keys are {', '.join(sorted(known))}")
    for key in ("mean", "std"):
        if key in table:
            table[key] = tuple(float(v) for v in table[key])
    if "text_score" in table and (isinstance(table["text_score"], bool) or not isinstance(table["text_score"], (int, float))):
        raise ValueError(f"[recognition] text_score must be a number, got {table['text_score']!r}")
    for key in ("height", "width", "max_width", "blank_index", "max_words", "batch"):
        if key in table and (isinstance(table[key], bool) or not isinstance(table[key], int)):
            raise ValueError(f"[recognition] {key} must be an integer, got {table[key]!r}")
    return Recognition(**table)


register_table("recognition", parameters)  # the spec checks its [recognition] tables with it


def words_read(scores: np.ndarray, p: Recognition) -> np.ndarray:
    """The indices (ascending: the detector's order) of the boxes whose words are read: every box,
    or the ``max_words`` of the highest detector scores (ties: the earlier box). The ocr models
    and the harness's reference both keep these."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    if len(scores) <= p.max_words:
        return np.arange(len(scores))
    return np.sort(np.argsort(-scores, kind="stable")[:p.max_words])


# -- the model input ------------------------------------------------------------------------------


def input_width(crop_height: int, crop_width: int, p: Recognition, widest: float | None = None) -> tuple[int, int]:
    """(the resized crop's width, the input's width) for a crop of this size: rapidocr's
    ``resize_norm_img`` (width ``int(height * max(width / height, widest))``, the crop
    ``ceil(height * ratio)`` within it), capped at ``max_width``; ``widest``: the largest aspect ratio
    of the crop's batch (:func:`input_widths`), by default its own."""
    ratio = crop_width / float(crop_height)
    padded = min(int(p.height * max(p.width / p.height, ratio if widest is None else widest)), p.max_width)
    resized = min(int(math.ceil(p.height * ratio)), padded)
    return max(resized, 1), padded


def batch_ratios(sizes: Sequence[tuple[int, int]], p: Recognition) -> list[float]:
    """The largest aspect ratio of each crop's batch (``sizes``: one image's crops' (height, width)):
    rapidocr's ``TextRecognizer.__call__``, the crops sorted by aspect ratio (numpy's ``argsort``,
    as it sorts them) and taken ``batch`` at a time; with ``batch`` 1, each crop's own."""
    ratios = np.array([width / float(height) for height, width in sizes], np.float64)
    order = np.argsort(ratios)
    widest = ratios.copy()
    for start in range(0, len(order), p.batch):
        members = order[start:start + p.batch]
        widest[members] = ratios[members].max()
    return [float(r) for r in widest]


def input_widths(sizes: Sequence[tuple[int, int]], p: Recognition) -> list[tuple[int, int]]:
    """:func:`input_width` of each of one image's crops, each padded to the widest of its batch."""
    return [input_width(height, width, p, widest) for (height, width), widest in zip(sizes, batch_ratios(sizes, p))]


def to_input(crop: np.ndarray, p: Recognition, order: str = "RGB", widest: float | None = None) -> np.ndarray:
    """A crop (HWC uint8 in channel ``order``) -> the recognizer's input [3, height, W] float32;
    ``widest``: the largest aspect ratio of its batch (:func:`batch_ratios`), by default its own."""
    crop = channels.reorder_hwc(crop, order, p)
    resized_w, padded_w = input_width(crop.shape[0], crop.shape[1], p, widest)
    resized = resize_filter.OPERATION.kernels["opencv"](np.ascontiguousarray(crop), (p.height, resized_w),
                                                        resize_filter.CV2_DEFAULT).astype(np.float32)
    chw = resized.transpose(2, 0, 1) / (255.0 / p.pixel_range)
    chw = (chw - np.asarray(p.mean, np.float32)[:, None, None]) / np.asarray(p.std, np.float32)[:, None, None]
    out = np.full((3, p.height, padded_w), p.pad_value, np.float32)
    out[:, :, :resized_w] = chw
    return out


def to_inputs(crops: Sequence[np.ndarray], p: Recognition, order: str = "RGB") -> list[np.ndarray]:
    """:func:`to_input` of each of one image's crops, each padded to the widest of its batch."""
    widest = batch_ratios([crop.shape[:2] for crop in crops], p)
    return [to_input(crop, p, order, w) for crop, w in zip(crops, widest)]


# -- decoding -------------------------------------------------------------------------------------


def load_dictionary(path: str | Path) -> list[str]:
    """The characters of a dictionary file (one a line) or of an ONNX's ``character`` metadata."""
    path = Path(path)
    if path.suffix == ".onnx":
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        if METADATA_KEY not in meta:
            raise ValueError(f"{path} has no '{METADATA_KEY}' metadata: no dictionary to decode its output with")
        return meta[METADATA_KEY].splitlines()
    return path.read_text(encoding="utf-8").splitlines()


class CtcDecoder:
    """CTC greedy decoding with a dictionary: the blank at ``blank_index`` of the class axis, the
    dictionary's characters after it, a space last (PaddleOCR's ``use_space_char``)."""

    def __init__(self, characters: list[str], blank_index: int = 0):
        self.blank_index = blank_index
        self.characters = list(characters) + [" "]
        self.classes = len(self.characters) + 1

    def char(self, index: int) -> str:
        """The character of class ``index`` (the blank: '')."""
        if index == self.blank_index:
            return ""
        return self.characters[index - (index > self.blank_index)]

    def text(self, classes: np.ndarray) -> str:
        """The text of a sequence of per-step classes (repeats merged, blanks dropped)."""
        classes = np.asarray(classes)
        keep = np.ones(len(classes), bool)
        keep[1:] = classes[1:] != classes[:-1]
        return "".join(self.char(int(c)) for c in classes[keep & (classes != self.blank_index)])

    def kept(self, probabilities: np.ndarray) -> np.ndarray:
        """The steps whose class is a character (repeats merged, blanks dropped)."""
        best = np.asarray(probabilities).argmax(axis=-1)
        keep = np.ones(len(best), bool)
        keep[1:] = best[1:] != best[:-1]
        return keep & (best != self.blank_index)

    def __call__(self, probabilities: np.ndarray) -> tuple[str, float]:
        """[T, classes] -> (text, score)."""
        probabilities = np.asarray(probabilities, np.float32)
        if probabilities.ndim != 2 or probabilities.shape[1] != self.classes:
            raise ValueError(f"the recognizer's output must be [steps, {self.classes}] per word (the dictionary's "
                             f"{self.classes - 2} characters, the blank and a space), got {list(probabilities.shape)}")
        keep = self.kept(probabilities)
        best = probabilities.argmax(axis=-1)
        text = "".join(self.char(int(i)) for i in best[keep])
        confidences = [round(float(c), 5) for c in probabilities.max(axis=-1)[keep]] or [0.0]
        return text, round(float(np.mean(confidences)), 5)

    def margins(self, probabilities: np.ndarray) -> np.ndarray:
        """Per step, the best class's probability minus the second best's."""
        top2 = np.sort(np.asarray(probabilities, np.float32), axis=-1)[:, -2:]
        return top2[:, 1] - top2[:, 0]
