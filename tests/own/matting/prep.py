"""A step taking the photo's bytes (``image``) and answering U²-Net-p's input (``tensor``,
float32 [1, 3, 320, 320]) as rembg makes it (``rembg_prep.py``; ``mode`` plants a hand port's
mistakes)."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rembg_prep  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        self.mode = json.loads(args["model_config"])["parameters"]["mode"]["string_value"]

    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().reshape(-1)[0]
            try:
                x = rembg_prep.model_input(bytes(data), self.mode)
            except Exception as exc:  # noqa: BLE001 - a bad file is this request's error
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("tensor", np.ascontiguousarray(x))]))
        return out
