"""A foreign OCR deployment for the tests: ocr_opencv's answer with its first word's text replaced
(the ``mode`` parameter: ``invalid``, bytes that are not UTF-8; ``empty``, an empty string)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

OUTPUTS = ("BOXES", "SCORES", "TEXTS", "PROBABILITY", "GEOMETRY")
REPLACEMENT = {"invalid": b"\xff\xfeSALE", "empty": b""}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.text = REPLACEMENT[config["parameters"]["mode"]["string_value"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE")
            answer = pb_utils.InferenceRequest(model_name="ocr_opencv", inputs=[image],
                                               requested_output_names=list(OUTPUTS)).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            found = {name: pb_utils.get_output_tensor_by_name(answer, name).as_numpy() for name in OUTPUTS}
            texts = np.array(found["TEXTS"], dtype=object)
            if texts.size:
                texts[0, 0] = self.text
            found["TEXTS"] = texts
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, v) for n, v in found.items()]))
        return responses
