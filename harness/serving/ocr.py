"""ocr_dali, ocr_opencv (and their ``_taps`` twins): an image's words, by business-logic
scripting (BLS) in the Python backend.

One request holds one encoded image. The model checks it with the image guard
(:func:`harness.preprocessing.image_check.validate`: a bad image is refused, ``INVALID_ARGUMENT``,
before any model runs), asks the detection ensemble its config names (``detection_model``: detect_dali or
detect_opencv) for the boxes, the raw map and the geometry; reads at most ``max_words`` of the
boxes (``[recognition]``: the highest detector scores, :func:`harness.ocr.recognition.words_read`;
the others are left out of the answer and counted in ``WORDS_UNREAD``); decodes the image once
for all its words, either by the DALI model its config names (``decode_model``: ocr_decode_dali,
whose ``DECODED``, DALI's decode of the detector's spec, is all it answers) and cuts each box out
with the DALI model its config names (``recognition_preprocess``: ocr_preprocess_dali, one word
a request, each given only its region of the decoded image,
:func:`harness.ocr.dali_recognition.word_samples`), or, without one, with OpenCV
(:mod:`harness.ocr.recognition`: the harness's reference runs the same functions with the same
``[recognition]`` table); asks the ``recognizer`` for each word alone; and decodes its per-step
probabilities with the dictionary ``harness model export`` wrote beside the recognizer's ONNX
(``recognizer/dictionary.txt``).

A word scoring below ``[recognition] text_score`` is dropped, its box with it (rapidocr's
``filter_by_text_score``), unless ``WORDS_KEPT`` is asked for: then every word read is answered
and ``WORDS_KEPT`` says which are kept (what the harness compares). An image without words
answers zero words. A failing step fails only its own request, with its message and its code
(a bad image is the client's error, ``INVALID_ARGUMENT``). The stage taps (``WORD_*``: each
word's crop, input and output, about 3 MB a word) exist only in the ``_taps`` twins' configs,
and are made only when asked for by name there: a client naming no outputs of ``ocr_dali``
gets the words, not megabytes per word.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.geometry import Geometry
from harness.ocr.dali_recognition import INPUTS, word_samples
from harness.ocr.recognition import DICTIONARY_FILENAME, CtcDecoder, load_dictionary, parameters, to_inputs, words_read
from harness.ocr.tensors import TEXT_SCORES, TEXTS, WORD_TAPS, WORDS_KEPT, WORDS_UNREAD, pack_ragged
from harness.operations import word_crop
from harness.preprocessing import opencv
from harness.preprocessing.image_check import ImageError, validate
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of
from harness.stage import GEOMETRY_TENSOR, TAP_TENSORS, Stage

IMAGE = "IMAGE"
DETECTION_OUTPUTS = ("BOXES", "SCORES", "PROBABILITY", GEOMETRY_TENSOR)
RECOGNIZER_INPUT = "x"
RECOGNIZER_OUTPUT = "fetch_name_0"
DECODED = TAP_TENSORS[Stage.DECODE]


class StepFailed(Exception):
    """A model the BLS called answered an error: the request fails with that error, its code kept."""

    def __init__(self, error):
        super().__init__(error.message())
        self.error = error


def call(model: str, inputs: list, outputs: list[str]) -> dict[str, np.ndarray]:
    """One BLS request: its outputs by name, or :class:`StepFailed`."""
    answer = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs).exec()
    if answer.has_error():
        raise StepFailed(answer.error())
    return {name: pb_utils.get_output_tensor_by_name(answer, name).as_numpy() for name in outputs}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        repository = Path(args["model_repository"]).parent
        spec_file = repository / spec_name_of(config)
        spec = load_spec(spec_file)
        if spec.recognition is None:
            raise pb_utils.TritonModelException(f"{spec_file} has no [recognition] table: nothing says how to read the "
                                                "words of the detector's boxes")
        self.recognition = parameters(spec.recognition)
        self.spec = spec.preprocess
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.detection_model = params["detection_model"]
        self.recognizer = params.get("recognizer", "recognizer")
        self.preprocess_model = params.get("recognition_preprocess") or None
        self.decode_model = params.get("decode_model") or None
        if self.preprocess_model and not self.decode_model:
            raise pb_utils.TritonModelException("recognition_preprocess needs decode_model: the model whose DECODED "
                                                "output it cuts the words from")
        self.decoder = CtcDecoder(load_dictionary(repository / self.recognizer / DICTIONARY_FILENAME),
                                  self.recognition.blank_index)
        self.taps = {name for pair in WORD_TAPS.values() for name in pair} & {o["name"] for o in config["output"]}

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        image = pb_utils.get_input_tensor_by_name(request, IMAGE)
        data = image.as_numpy()
        if data.shape[0] != 1:
            return invalid_argument(f"send one image per request, got {data.shape[0]}")
        try:
            validate(data[0], "header", self.spec.resize)  # the image guard: refused before any model runs
            found = call(self.detection_model, [image], list(DETECTION_OUTPUTS))
            boxes, scores, unread = read_boxes(found, self.recognition)
            made = {**found, "BOXES": boxes[None], "SCORES": scores[None],
                    WORDS_UNREAD: np.array([[unread]], np.int32)}
            asked = set(request.requested_output_names() or ())
            made.update(self._words(image, data[0], boxes, scores, found, asked & self.taps, WORDS_KEPT in asked))
        except ImageError as exc:
            return invalid_argument(str(exc))
        except StepFailed as exc:
            return pb_utils.InferenceResponse(error=exc.error)
        names = set(request.requested_output_names() or ()) or set(made)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in made.items()
                                                          if name in names])

    def _words(self, image, data: np.ndarray, boxes: np.ndarray, box_scores: np.ndarray, found: dict, asked: set[str],
               every: bool) -> dict:
        """TEXTS, TEXT_SCORES and WORDS_KEPT of the boxes, with the boxes and scores answered,
        and the word taps ``asked`` for: the words kept by the text score, or ``every`` word read."""
        words = {"crop": [], "input": [], "output": []}
        texts, scores = [], []
        for crop, x in (self._inputs(image, data, boxes, found) if len(boxes) else ()):
            (probabilities,) = call(self.recognizer, [pb_utils.Tensor(RECOGNIZER_INPUT, x[None])],
                                    [RECOGNIZER_OUTPUT]).values()
            text, score = self.decoder(probabilities[0])
            texts.append(text.encode("utf-8"))
            scores.append(score)
            if asked:
                for stage, array in (("crop", crop), ("input", x), ("output", probabilities[0])):
                    words[stage].append(array)
        kept = np.array([self.recognition.keeps(score) for score in scores], bool)
        answered = np.arange(len(texts)) if every else np.flatnonzero(kept)
        made = {"BOXES": boxes[None, answered], "SCORES": box_scores[None, answered],
                TEXTS: np.array([texts], dtype=object).reshape(1, len(texts))[:, answered],
                TEXT_SCORES: np.array([scores], np.float32).reshape(1, len(scores))[:, answered],
                WORDS_KEPT: kept[None, answered]}
        for stage, (arrays, shapes) in WORD_TAPS.items():
            if arrays in asked or shapes in asked:
                least, dtype = {"crop": ((0, 0, 3), np.uint8), "input": ((3, self.recognition.height, 0), np.float32),
                                "output": ((0, self.decoder.classes), np.float32)}[stage]
                padded, sizes = pack_ragged([words[stage][i] for i in answered], least, dtype)
                made[arrays], made[shapes] = padded[None], sizes[None]
        return made

    def _inputs(self, image, data: np.ndarray, boxes: np.ndarray, found: dict):
        """(crop, recognizer input) of each box, the image decoded once: by the DALI models, or by OpenCV here."""
        if self.preprocess_model:
            (decoded,) = call(self.decode_model, [image], [DECODED]).values()
            size = tuple(int(v) for v in Geometry.from_tensor(found[GEOMETRY_TENSOR][0]).source)
            if decoded.shape[1:3] != size:
                raise StepFailed(pb_utils.TritonError(f"{self.decode_model} decoded a {decoded.shape[2]}x{decoded.shape[1]} "
                                                      f"image where {self.detection_model} saw {size[1]}x{size[0]}"))
            samples = word_samples(decoded[0], boxes, self.recognition)
            for i in range(len(boxes)):
                inputs = [pb_utils.Tensor(name, np.ascontiguousarray(samples[name][i][None])) for name in INPUTS]
                answer = call(self.preprocess_model, inputs, ["CROP", "INPUT"])
                yield answer["CROP"][0], answer["INPUT"][0]
            return
        rgb = opencv.decode(data, self.spec.decode)  # behind the image guard, as every decoder
        crops = [word_crop.crop_box(rgb, quad, self.recognition) for quad in boxes]
        yield from zip(crops, to_inputs(crops, self.recognition, "RGB"))  # each padded to the widest of its batch


def read_boxes(found: dict, p) -> tuple[np.ndarray, np.ndarray, int]:
    """(the boxes whose words are read, their scores, how many are left unread): at most the
    spec's ``max_words`` (:func:`harness.ocr.recognition.words_read`)."""
    boxes, scores = found["BOXES"][0], found["SCORES"][0]
    keep = words_read(scores, p)
    return boxes[keep], scores[keep], len(scores) - len(keep)
