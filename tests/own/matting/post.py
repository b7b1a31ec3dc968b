"""rembg's postprocessing as a step: the map (``pred``) and the photo's bytes (``image``, for
its size) -> the alpha matte (``alpha``, uint8 [H, W] at the photo's size); with the parameter
``layout`` "nchw", float32 0 to 1 [1, 1, H, W], the map's own layout kept by a step without batching."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rembg_prep  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.nchw = parameters.get("layout", {}).get("string_value") == "nchw"

    def execute(self, requests):
        out = []
        for request in requests:
            pred = pb_utils.get_input_tensor_by_name(request, "pred").as_numpy()
            data = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().reshape(-1)[0]
            matte = rembg_prep.alpha(pred, bytes(data))
            if self.nchw:
                matte = (matte.astype(np.float32) / 255.0)[None, None]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("alpha", np.ascontiguousarray(matte))]))
        return out
