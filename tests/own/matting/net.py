"""U²-Net-p's ONNX in ONNX Runtime, under the ONNX file's own tensor names (``input.1`` ->
``1959``, the fused map [1, 1, 320, 320]), as the onnxruntime backend would serve it."""

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = json.loads(args["model_config"])["parameters"]["onnx_path"]["string_value"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "input.1").as_numpy()
            (pred,) = self.session.run(["1959"], {"input.1": x})
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("1959", np.ascontiguousarray(pred, np.float32))]))
        return out
