"""classifier (cpu profile): the classifier's ONNX run by ONNX Runtime, in place of the
TensorRT engine of the GPU profile. Same tensor names, same labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

from harness.model import ONNX_FILENAME


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", {}).get("string_value", "0"))
        # Idle intra-op threads otherwise spin, burning a core the preprocessing models and
        # the clients need on a small CPU machine (5x the CPU time for the same work here).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        onnx_path = Path(args["model_repository"]) / ONNX_FILENAME
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.input_name = config["input"][0]["name"]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        # One ONNX Runtime call for the whole dynamic batch, then split per request.
        inputs = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        results = self.session.run(self.outputs, {self.input_name: np.concatenate(inputs)})
        responses, start = [], 0
        for x in inputs:
            stop = start + len(x)
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(out[start:stop])) for name, out in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = stop
        return responses
