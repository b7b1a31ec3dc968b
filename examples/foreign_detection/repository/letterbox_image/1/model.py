"""Decode with OpenCV (EXIF orientation applied, BGR) and letterbox to ``size`` x ``size``:
scale by ``r = min(size / h, size / w)``, resized sides ``round(side * r)``, the rest padded
with ``pad_value``. Out: ``pixels`` FP32 [3, size, size], ``(x / 255 - 0.5) / 0.5`` in
``channel_order``, and ``letterbox`` FP32 [5]: r, the padding left and top, the source width
and height (what the postprocessing step maps boxes back with).

Parameters (config.pbtxt): ``size`` (640), ``pad_position`` (``center``: the padding split
between both sides, the odd pixel after; ``top_left``: all of it at the bottom and right),
``pad_value`` (114), ``channel_order`` (``BGR``, OpenCV's own; ``RGB``).
"""

import json

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils


def letterbox(image: np.ndarray, size: int, pad_position: str, pad_value: int):
    height, width = image.shape[:2]
    r = min(size / height, size / width)
    new_w, new_h = int(round(width * r)), int(round(height * r))
    if (new_h, new_w) != (height, width):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = size - new_w, size - new_h
    left, top = (dw // 2, dh // 2) if pad_position == "center" else (0, 0)
    canvas = cv2.copyMakeBorder(image, top, dh - top, left, dw - left, cv2.BORDER_CONSTANT, value=(pad_value,) * 3)
    return canvas, np.array([r, left, top, width, height], np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.size = int(params.get("size", "640"))
        self.pad_position = params.get("pad_position", "center")
        self.pad_value = int(params.get("pad_value", "114"))
        self.rgb = params.get("channel_order", "BGR").upper() == "RGB"
        if self.pad_position not in ("center", "top_left"):
            raise pb_utils.TritonModelException(f"pad_position must be center or top_left, not {self.pad_position!r}")
        self.batched = config.get("max_batch_size", 0) > 0

    def prepare(self, data: bytes):
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError("not an image OpenCV can decode")
        canvas, info = letterbox(image, self.size, self.pad_position, self.pad_value)
        if self.rgb:
            canvas = canvas[..., ::-1]
        pixels = (canvas.astype(np.float32) / 255.0 - 0.5) / 0.5
        return np.ascontiguousarray(pixels.transpose(2, 0, 1)), info

    def execute(self, requests):
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "encoded").as_numpy().reshape(-1)
            try:
                made = [self.prepare(bytes(item)) for item in encoded]
            except Exception as exc:  # one bad file fails its own request, with a one-line reason
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cannot decode: {message}")))
                continue
            pixels, info = np.stack([m[0] for m in made]), np.stack([m[1] for m in made])
            if not self.batched:
                pixels, info = pixels[0], info[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("pixels", pixels),
                                                         pb_utils.Tensor("letterbox", info)]))
        return responses
