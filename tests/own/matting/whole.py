"""One model taking the photo's bytes (``image``) and answering the matte at the model's size
(``matte``, float32 [320, 320], 0 to 1): rembg's preprocessing, U²-Net-p in ONNX Runtime, the
min-max rescale; the client brings it to the photo's size. ``mode`` plants a hand port's mistakes."""

import json
import os
import sys

import onnxruntime as ort
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rembg_prep  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.mode = parameters["mode"]["string_value"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(parameters["onnx_path"]["string_value"], options,
                                            providers=["CPUExecutionProvider"])

    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().reshape(-1)[0]
            try:
                x = rembg_prep.model_input(bytes(data), self.mode)
            except Exception as exc:  # noqa: BLE001 - a bad file is this request's error
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            (pred,) = self.session.run(["1959"], {"input.1": x})
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("matte", rembg_prep.matte(pred))]))
        return out
