"""The classifier as training ran it: PyTorch eager for the default model, else ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.model import DEFAULT_EMBEDDER_TAG, DEFAULT_MODEL_TAG, LOGITS, model_tag, onnx_signature
from harness.spec import SpecError


class ReferenceModel:
    """``logits(batch)`` on [batch, 3, H, W] float32: the model's raw output (a classifier's
    logits, an embedder's features: the task's ``output`` stage)."""

    name = "model"
    input_shape: tuple[int, ...] | None = None
    """(3, H, W) the model takes, when known; -1 for a side it takes in any size (a detector's)."""

    def logits(self, batch: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def check_input(self, shape: tuple[int, ...]) -> None:
        """Raise :class:`SpecError` if inputs of this (C, H, W) shape cannot go into the model."""
        if self.input_shape and not shape_fits(shape, self.input_shape):
            raise SpecError(f"the reference recipe makes {list(shape)} model inputs but the model takes "
                            f"{list(self.input_shape)}: check crop.size (or the resize) in the spec's [reference]")


def shape_fits(shape, expected) -> bool:
    """A (C, H, W) input fits a model's (C, H, W), where -1 on either side is any size."""
    return len(shape) == len(expected) and all(a == b or a == -1 or b == -1 for a, b in zip(shape, expected))


def _static(dims) -> tuple[int, ...]:
    """ONNX dims with every symbolic one as -1."""
    return tuple(d if isinstance(d, int) and d > 0 else -1 for d in dims)


class TorchModel(ReferenceModel):
    """EfficientNet-Lite0 in PyTorch eager; ``half=True`` runs it in fp16 (as TensorRT --fp16 would);
    ``features=True`` gives its pooled features (the embedder) instead of its logits."""

    def __init__(self, half: bool = False, threads: int | None = None, features: bool = False):
        import torch

        from harness.model import load_torch_model

        if threads:
            torch.set_num_threads(threads)  # process-wide: torch has no per-model setting
        self.half, self.features = half, features
        self.model = load_torch_model().half() if half else load_torch_model()
        self.name = f"pytorch (EfficientNet-Lite0{' features' if features else ''}, eager{', fp16' if half else ''})"

    def logits(self, batch):
        import torch

        x = torch.from_numpy(np.ascontiguousarray(batch, np.float32))
        with torch.inference_mode():
            x = x.half() if self.half else x
            if self.features:  # what harness.model.export_embedder exports
                return torch.flatten(self.model._avg_pooling(self.model.extract_features(x)), 1).float().numpy()
            return self.model(x).float().numpy()


class OnnxModel(ReferenceModel):
    def __init__(self, onnx_path: Path, threads: int | None = None):
        from harness.model import onnx_session

        self.name = f"onnxruntime ({onnx_path.name})"
        self.session = onnx_session(onnx_path, threads or 0)
        outputs = [o.name for o in self.session.get_outputs()]
        self._output = LOGITS if LOGITS in outputs else outputs[0]  # a user's model may name it otherwise
        self._input = self.session.get_inputs()[0].name

    def logits(self, batch):
        return self.session.run([self._output], {self._input: np.ascontiguousarray(batch, np.float32)})[0]


class TorchScriptModel(ReferenceModel):
    """A user's TorchScript file (``torch.jit.save``), run on the CPU: its first output is the logits."""

    def __init__(self, path: Path, threads: int | None = None):
        import torch

        if threads:
            torch.set_num_threads(threads)
        try:
            self.module = torch.jit.load(str(path), map_location="cpu").eval()
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/ValueError of many kinds
            raise SpecError(f"{path} is not a TorchScript file torch can load: {str(exc).strip().splitlines()[0]}") from None
        self.name = f"torchscript ({path.name})"

    def logits(self, batch):
        import torch

        with torch.inference_mode():
            out = self.module(torch.from_numpy(np.ascontiguousarray(batch, np.float32)))
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().numpy()


CHOICES = ("auto", "torch", "onnx")
"""``--reference-model`` values that name how to run the repository's classifier (else a file)."""
ONNX_SUFFIXES = (".onnx",)


def load_reference_model(onnx_path: Path, choice: str = "auto", threads: int | None = None) -> ReferenceModel:
    """``auto``: PyTorch when the ONNX is the default EfficientNet-Lite0 export, else the
    ONNX itself in ONNX Runtime (all we have of a user's model); or force ``torch``/``onnx``;
    or ``choice`` is the path of the user's own trained model: an ONNX file (ONNX Runtime)
    or a TorchScript file (PyTorch). ``threads``: intra-op threads per call (default: the
    library's); with several images in flight, one each is faster than oversubscribing the cores."""
    if choice not in CHOICES:
        return load_model_file(Path(choice), threads)
    tag = model_tag(onnx_path)
    features = tag == DEFAULT_EMBEDDER_TAG
    model = TorchModel(threads=threads, features=features) if choice == "torch" or (
        choice == "auto" and tag in (DEFAULT_MODEL_TAG, DEFAULT_EMBEDDER_TAG)) else OnnxModel(onnx_path, threads=threads)
    model.input_shape = _static(onnx_signature(onnx_path)[0][0].shape[1:])
    return model


def load_model_file(path: Path, threads: int | None = None) -> ReferenceModel:
    """The user's trained model from a file: ``.onnx`` in ONNX Runtime, anything else as TorchScript."""
    if not path.is_file():
        raise SpecError(f"--reference-model {path}: no such file (or one of {', '.join(CHOICES)})")
    if path.suffix.lower() not in ONNX_SUFFIXES:
        return TorchScriptModel(path, threads)
    from harness.model import ModelError

    try:
        model = OnnxModel(path, threads=threads)
        inputs = onnx_signature(path)[0]
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnx/onnxruntime raise their own types for a bad file
        raise SpecError(f"{path} is not an ONNX model ONNX Runtime can load: {str(exc).strip().splitlines()[0]}") from None
    model.input_shape = _static(inputs[0].shape[1:])
    return model
