"""A foreign segmentation deployment for the tests (none of the repository's names): the photo
(``photo``, its JPEG bytes) preprocessed here as rembg does (PIL decode, LANCZOS stretch to
320x320, divided by the image's maximum, ImageNet mean/std), the two-class network
``cutout_net`` called (U²-Net-p with an argmax head: logits [2, 320, 320] = [0, log-odds]),
its logits answered as ``class_logits``.

The ``mode`` parameter plants what a foreign deployment gets wrong: ``aligned``; ``bgr`` (the
channels fed in BGR order); ``nan`` (the logits answered NaN); ``small_mask`` (an ``alpha``
and a ``mask`` answered at the model's 320x320, not the source size)."""

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.mode = config["parameters"]["mode"]["string_value"]

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        data = pb_utils.get_input_tensor_by_name(request, "photo").as_numpy().reshape(-1).tobytes()
        image = Image.open(io.BytesIO(data)).convert("RGB").resize((320, 320), Image.LANCZOS)
        pixels = np.asarray(image, np.float64)
        pixels = pixels / np.max(pixels)
        if self.mode == "bgr":
            pixels = pixels[:, :, ::-1]
        pixels = ((pixels - MEAN) / STD).astype(np.float32).transpose(2, 0, 1)[None]
        answer = pb_utils.InferenceRequest(model_name="cutout_net", inputs=[pb_utils.Tensor("pixels", pixels)],
                                           requested_output_names=["class_logits"]).exec()
        if answer.has_error():
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message()))
        logits = pb_utils.get_output_tensor_by_name(answer, "class_logits").as_numpy()[0]
        if self.mode == "nan":
            logits = np.full_like(logits, np.nan)
        if self.mode == "small_mask":
            e = np.exp(logits - logits.max(axis=0))
            alpha = (e / e.sum(axis=0))[1].astype(np.float32)
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("alpha", alpha), pb_utils.Tensor("mask", (alpha > 0.5).astype(np.uint8))])
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("class_logits", logits)])
