"""The detector ONNX in ONNX Runtime (one thread): ``image`` FP32 [3, H, W] in, ``probability``
FP32 [1, H, W] out. Parameter ``onnx_path``: the file (empty: the detector inside the installed
rapidocr wheel, ``rapidocr/models/PP-OCRv6_det_small.onnx``)."""

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = config.get("parameters", {}).get("onnx_path", {}).get("string_value", "")
        if not path:
            import rapidocr

            path = str(Path(rapidocr.__file__).parent / "models" / "PP-OCRv6_det_small.onnx")
        if not os.path.isfile(path):
            raise pb_utils.TritonModelException(f"text_detector: parameter onnx_path must name an ONNX file, got {path!r}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
            out = self.session.run(None, {self.input: x if self.batched else x[None]})[0]
            out = np.ascontiguousarray(out, np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("probability", out if self.batched else out[0])]))
        return responses
