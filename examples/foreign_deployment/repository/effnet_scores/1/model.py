"""An ONNX classifier in ONNX Runtime: its first input is fed ``pixels_nchw``, its output
``logits`` (or its first) is returned as ``class_scores``. Parameter ``onnx_path``: the
file, absolute or relative to this version folder (default ``model.onnx`` beside this file)."""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = config.get("parameters", {}).get("onnx_path", {}).get("string_value", "") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], path)  # an absolute path stays
        if not os.path.isfile(path):
            raise pb_utils.TritonModelException(f"effnet_scores: parameter onnx_path must name an ONNX file, got {path!r}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "logits" if "logits" in outputs else outputs[0]
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "pixels_nchw").as_numpy()
            scores = self.session.run([self.output], {self.input: x if self.batched else x[None]})[0]
            scores = np.ascontiguousarray(scores, np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("class_scores", scores if self.batched else scores[0])]))
        return responses
