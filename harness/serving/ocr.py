"""ocr_dali, ocr_opencv: an image's words, by business-logic scripting (BLS) in the Python backend.

One request holds one encoded image. The model asks the detection ensemble its config names
(``detection_model``: detect_dali or detect_opencv) for the boxes, the raw map and the
geometry; cuts each box out and makes the recognizer's input, either with the DALI model its
config names (``recognition_preprocess``: ocr_preprocess_dali, one word a request, the geometry
computed here by :func:`harness.ocr.dali_recognition.word_samples`) or, without one, with
OpenCV (:mod:`harness.ocr.recognition`: the harness's reference runs the same functions with
the same ``[recognition]`` table); asks the ``recognizer`` for each word alone; and
decodes its per-step probabilities with the dictionary ``harness model export`` wrote beside
the recognizer's ONNX (``recognizer/dictionary.txt``).

An image without words answers zero words. A failing step fails only its own request, with
its message. The stage taps (``WORD_*``) are made only when asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.geometry import Geometry
from harness.ocr.dali_recognition import INPUTS, word_samples
from harness.ocr.recognition import DICTIONARY_FILENAME, CtcDecoder, crop_box, load_dictionary, parameters, to_input
from harness.ocr.tensors import TEXT_SCORES, TEXTS, WORD_TAPS, pack_ragged
from harness.preprocessing import opencv
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of
from harness.stage import GEOMETRY_TENSOR

IMAGE = "IMAGE"
DETECTION_OUTPUTS = ("BOXES", "SCORES", "PROBABILITY", GEOMETRY_TENSOR)
RECOGNIZER_INPUT = "x"
RECOGNIZER_OUTPUT = "fetch_name_0"


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
        self.decode = spec.preprocess.decode
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.detection_model = params["detection_model"]
        self.recognizer = params.get("recognizer", "recognizer")
        self.preprocess_model = params.get("recognition_preprocess") or None
        self.decoder = CtcDecoder(load_dictionary(repository / self.recognizer / DICTIONARY_FILENAME),
                                  self.recognition.blank_index)

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        image = pb_utils.get_input_tensor_by_name(request, IMAGE)
        data = image.as_numpy()
        if data.shape[0] != 1:
            return invalid_argument(f"send one image per request, got {data.shape[0]}")
        detected = pb_utils.InferenceRequest(model_name=self.detection_model, inputs=[image],
                                             requested_output_names=list(DETECTION_OUTPUTS)).exec()
        if detected.has_error():
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(detected.error().message()))
        found = {name: pb_utils.get_output_tensor_by_name(detected, name).as_numpy() for name in DETECTION_OUTPUTS}
        asked = set(request.requested_output_names() or ())
        words = {"crop": [], "input": [], "output": []}
        texts, scores = [], []
        if len(found["BOXES"][0]):
            try:
                made_inputs = list(self._inputs(data[0].tobytes(), found))
            except ValueError as exc:
                return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
            for crop, x in made_inputs:
                answer = pb_utils.InferenceRequest(model_name=self.recognizer,
                                                   inputs=[pb_utils.Tensor(RECOGNIZER_INPUT, x[None])],
                                                   requested_output_names=[RECOGNIZER_OUTPUT]).exec()
                if answer.has_error():
                    return pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message()))
                probabilities = pb_utils.get_output_tensor_by_name(answer, RECOGNIZER_OUTPUT).as_numpy()[0]
                text, score = self.decoder(probabilities)
                texts.append(text.encode("utf-8"))
                scores.append(score)
                for stage, array in (("crop", crop), ("input", x), ("output", probabilities)):
                    words[stage].append(array)
        made = {name: value for name, value in found.items()}
        made[TEXTS] = np.array([texts], dtype=object).reshape(1, len(texts))
        made[TEXT_SCORES] = np.array([scores], np.float32).reshape(1, len(scores))
        for stage, (arrays, shapes) in WORD_TAPS.items():
            if arrays in asked or shapes in asked:
                least, dtype = {"crop": ((0, 0, 3), np.uint8), "input": ((3, self.recognition.height, 0), np.float32),
                                "output": ((0, self.decoder.classes), np.float32)}[stage]
                padded, sizes = pack_ragged(words[stage], least, dtype)
                made[arrays], made[shapes] = padded[None], sizes[None]
        names = asked or set(DETECTION_OUTPUTS) | {TEXTS, TEXT_SCORES}
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in made.items()
                                                          if name in names])

    def _inputs(self, data: bytes, found: dict):
        """(crop, recognizer input) of each box: by the DALI model, or by OpenCV here."""
        boxes = found["BOXES"][0]
        if self.preprocess_model:
            size = tuple(int(v) for v in Geometry.from_tensor(found[GEOMETRY_TENSOR][0]).source)
            samples = word_samples(data, boxes, self.recognition, size)
            for i in range(len(boxes)):
                inputs = [pb_utils.Tensor(name, np.ascontiguousarray(samples[name][i][None])) for name in INPUTS]
                answer = pb_utils.InferenceRequest(model_name=self.preprocess_model, inputs=inputs,
                                                   requested_output_names=["CROP", "INPUT"]).exec()
                if answer.has_error():
                    raise ValueError(answer.error().message())
                yield (pb_utils.get_output_tensor_by_name(answer, "CROP").as_numpy()[0],
                       pb_utils.get_output_tensor_by_name(answer, "INPUT").as_numpy()[0])
            return
        rgb = opencv.decode(data, self.decode)  # behind the image guard, as every decoder
        for quad in boxes:
            crop = crop_box(rgb, quad, self.recognition)
            yield crop, to_input(crop, self.recognition, "RGB")
