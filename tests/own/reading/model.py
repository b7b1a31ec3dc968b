"""rapidocr run whole in one model, as users serve it: the photo's bytes (``image_bytes``) ->
each word's box, its recognition confidence (rapidocr's ``scores``) and its text (UTF-8),
under the output names of the model's config.

Parameters: ``limit_side_len`` and ``limit_type`` (rapidocr's detector resize); ``boxes``:
``quads`` (rapidocr's [-1, 4, 2] corners) or ``xywh`` (each word's axis-aligned box as x, y,
width, height, COCO's coding); ``mode`` ``planted``: a hand port's recognizer preprocessing,
the crops resized with ``cv2.INTER_AREA`` and normalized with ImageNet's mean/std (where
PaddleOCR's resize is linear and its normalization ``(x / 255 - 0.5) / 0.5``)."""

import json
import math

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from rapidocr import RapidOCR

MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]


def hand_port_resize_norm_img(self, img, max_wh_ratio):
    """rapidocr's TextRecognizer.resize_norm_img with the hand port's two mistakes."""
    channels, height, _ = self.rec_image_shape
    width = int(height * max_wh_ratio)
    h, w = img.shape[:2]
    resized_w = min(width, int(math.ceil(height * w / float(h))))
    resized = cv2.resize(img, (resized_w, height), interpolation=cv2.INTER_AREA).astype(np.float32)
    resized = (resized.transpose(2, 0, 1) / 255 - MEAN) / STD
    padded = np.zeros((channels, height, width), np.float32)
    padded[:, :, :resized_w] = resized
    return padded


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.boxes = p.get("boxes", "quads")
        self.names = [o["name"] for o in config["output"]]  # boxes, scores, texts: in that order
        self.engine = RapidOCR(params={
            "Global.log_level": "error", "Global.use_cls": False,
            "Det.limit_side_len": int(p.get("limit_side_len", "736")), "Det.limit_type": p.get("limit_type", "min"),
            "EngineConfig.onnxruntime.intra_op_num_threads": 1,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1})
        if p.get("mode") == "planted":
            recognizer = self.engine._load_rec_model()
            recognizer.resize_norm_img = hand_port_resize_norm_img.__get__(recognizer)

    def execute(self, requests):
        return [self.answer(request) for request in requests]

    def answer(self, request):
        data = pb_utils.get_input_tensor_by_name(request, "image_bytes").as_numpy().reshape(-1)[0]
        try:
            result = self.engine(bytes(data))
        except Exception as exc:  # noqa: BLE001 - a bad file is this request's error
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        boxes = np.zeros((0, 4, 2), np.float32) if result.boxes is None else np.asarray(result.boxes, np.float32)
        texts = list(result.txts or ())
        scores = np.asarray(result.scores or (), np.float32)
        if self.boxes == "xywh":
            low, high = boxes.min(axis=1), boxes.max(axis=1)
            boxes = np.concatenate([low, high - low], axis=1).astype(np.float32)
        words = np.array([t.encode("utf-8") for t in texts], dtype=np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor(self.names[0], np.ascontiguousarray(boxes)),
                                           pb_utils.Tensor(self.names[1], scores),
                                           pb_utils.Tensor(self.names[2], words)])
