"""(x / 255 - mean) / std with ImageNet's mean and std, HWC -> CHW.

Parameter ``channel_order``: "RGB" (what the model was trained on) or "BGR": the pixels are
flipped before normalizing with the same (RGB) mean and std, as when an OpenCV decode's BGR
array reaches code written for RGB: the classic port mistake.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.bgr = config.get("parameters", {}).get("channel_order", {}).get("string_value", "RGB").upper() == "BGR"
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "image_nhwc").as_numpy()
            if not self.batched:
                images = images[None]
            if self.bgr:
                images = images[..., ::-1]
            x = (images / np.float32(255.0) - MEAN) / STD
            out = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)), np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("pixels_nchw", out if self.batched else out[0])]))
        return responses
