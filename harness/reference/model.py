"""The classifier as training ran it: PyTorch eager for the default model, else ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.model import DEFAULT_MODEL_TAG, LOGITS, model_tag


class ReferenceModel:
    """``logits(batch)`` on [batch, 3, H, W] float32."""

    name = "model"

    def logits(self, batch: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class TorchModel(ReferenceModel):
    name = "pytorch (EfficientNet-Lite0, eager)"

    def __init__(self):
        from harness.model import load_torch_model

        self.model = load_torch_model()

    def logits(self, batch):
        import torch

        with torch.inference_mode():
            return self.model(torch.from_numpy(np.ascontiguousarray(batch, np.float32))).numpy()


class OnnxModel(ReferenceModel):
    def __init__(self, onnx_path: Path):
        import onnxruntime as ort

        self.name = f"onnxruntime ({onnx_path.name})"
        self.session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])

    def logits(self, batch):
        return self.session.run([LOGITS], {self.session.get_inputs()[0].name: np.ascontiguousarray(batch, np.float32)})[0]


def load_reference_model(onnx_path: Path, choice: str = "auto") -> ReferenceModel:
    """``auto``: PyTorch when the ONNX is the default EfficientNet-Lite0 export, else the
    ONNX itself in ONNX Runtime (all we have of a user's model); or force ``torch``/``onnx``."""
    if choice == "torch" or (choice == "auto" and model_tag(onnx_path) == DEFAULT_MODEL_TAG):
        return TorchModel()
    return OnnxModel(onnx_path)
