"""A planted wrong answer for the load test and the watch (written into the tests' servers): the
``target`` model's answer, every second request wrong. ``mode`` ``mask``: the matte and the mask
inverted (a segmenter's answer); ``word``: the first word's text reversed and its last character
doubled (an OCR model's). Python backend, one request at a time through BLS."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.target, self.mode = params["target"], params["mode"]
        self.outputs = [o["name"] for o in config["output"]]
        self.count = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.count += 1
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE")
            asked = list(request.requested_output_names() or self.outputs)
            answer = pb_utils.InferenceRequest(model_name=self.target, inputs=[image],
                                               requested_output_names=asked).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            found = {name: pb_utils.get_output_tensor_by_name(answer, name).as_numpy() for name in asked}
            if self.count % 2 == 0:
                self.plant(found)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, v) for n, v in found.items()]))
        return responses

    def plant(self, found):
        if self.mode == "mask":
            if "MATTE" in found:
                found["MATTE"] = (1.0 - found["MATTE"]).astype(np.float32)
            if "MASK" in found:
                found["MASK"] = (1 - found["MASK"]).astype(found["MASK"].dtype)
        elif "TEXTS" in found and found["TEXTS"].size:
            texts = np.array(found["TEXTS"], dtype=object)
            word = bytes(texts.flat[0]).decode("utf-8")
            texts.flat[0] = (word[::-1] + word[-1:] + "X").encode("utf-8")
            found["TEXTS"] = texts
