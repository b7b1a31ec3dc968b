"""Decode with PIL (EXIF orientation applied), stretch to 224x224, NHWC float32 on 0-255.

Parameter ``resize_antialias``: "true" resizes with PIL's bilinear filter, which antialiases
when shrinking (as torchvision's Resize on PIL images does); "false" with cv2.resize
INTER_LINEAR, which does not.
"""

import io
import json

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, ImageOps

SIZE = (224, 224)


def decode(data: bytes, antialias: bool) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        rgb = ImageOps.exif_transpose(image).convert("RGB")
        if antialias:
            return np.asarray(rgb.resize(SIZE, Image.BILINEAR), np.float32)
        return cv2.resize(np.asarray(rgb), SIZE, interpolation=cv2.INTER_LINEAR).astype(np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        value = config.get("parameters", {}).get("resize_antialias", {}).get("string_value", "true")
        self.antialias = value.lower() == "true"
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "encoded").as_numpy().reshape(-1)
            try:
                images = np.stack([decode(bytes(item), self.antialias) for item in encoded])
            except Exception as exc:  # one bad file fails its own request, with a one-line reason
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cannot decode: {message}")))
                continue
            out = images if self.batched else images[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("image_nhwc", out)]))
        return responses
