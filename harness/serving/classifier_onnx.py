"""classifier (cpu profile): the classifier's ONNX run by ONNX Runtime, in place of the
TensorRT engine of the GPU profile. Same tensor names, same labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.model import ONNX_FILENAME, onnx_run_options, onnx_session


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        threads = int(params.get("intra_op_threads", {}).get("string_value", "0"))
        self.session = onnx_session(Path(args["model_repository"]) / ONNX_FILENAME, threads)
        self.run_options = onnx_run_options()  # one large input does not hold the server's memory for good
        self.input_name = config["input"][0]["name"]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        # One ONNX Runtime call for the whole dynamic batch, then split per request.
        inputs = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        results = self.session.run(self.outputs, {self.input_name: np.concatenate(inputs)}, self.run_options)
        responses, start = [], 0
        for x in inputs:
            stop = start + len(x)
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(out[start:stop])) for name, out in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = stop
        return responses
