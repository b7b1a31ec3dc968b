"""Where the default model in fp16 first leaves fp32: what diagnose's "model in fp16" hypothesis
says beside its advice (the same PyTorch model in half precision the hypothesis runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from harness.layers.compare import LayerTolerance, batches_of, compare_layers
from harness.layers.executions import LayerGraph, TorchExecution
from harness.model import load_torch_model

DEFAULT_IMAGES = 8
"""Images the layer comparison runs on (fp16 convolutions on the CPU are slow in PyTorch)."""


@dataclass(frozen=True)
class Fp16Layers:
    """PyTorch fp16 against fp32, layer by layer, on a few images."""

    first_divergent_layer: str | None
    worst_layer: str
    worst_rel_rms: float
    output_rel_rms: float
    images: int

    def sentence(self) -> str:
        if self.first_divergent_layer:
            return f"in fp16 the model first diverges at layer `{self.first_divergent_layer}`"
        return (f"no layer of the model diverges in fp16 by itself, the error builds up over the layers: worst "
                f"`{self.worst_layer}`, relative RMS error {self.worst_rel_rms:.2g}, {self.output_rel_rms:.2g} at the "
                f"logits, on {self.images} images")


def fp16_layers(onnx_path, data: Sequence[bytes], recipe: Callable[[bytes], dict], images: int = DEFAULT_IMAGES,
                tolerance: LayerTolerance = LayerTolerance()) -> Fp16Layers:
    """Compare the default PyTorch model in fp32 and in fp16 layer by layer on the model inputs
    ``recipe`` makes of the first ``images`` of ``data`` (default 8); layers named by the default
    model's export ``onnx_path``."""
    graph = LayerGraph.from_onnx(onnx_path)
    executions = [TorchExecution("torch", graph), TorchExecution("torch-fp16", graph, load_torch_model().half())]
    inputs = ((str(i), recipe(d)["input"]) for i, d in enumerate(data[:images]))
    (pair,), count = compare_layers(batches_of(inputs, 4), executions, graph, tolerance)
    worst = max(pair.rows, key=lambda r: r.rel_rms)
    return Fp16Layers(pair.first_divergent_layer, worst.node, worst.rel_rms, pair.rows[-1].rel_rms, count)
