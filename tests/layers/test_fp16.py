"""What diagnose's "model in fp16" hypothesis says beside its advice: the default PyTorch model in
fp32 against fp16, layer by layer, on real photos."""

from __future__ import annotations

import numpy as np
import torch

from harness.layers.compare import batches_of, compare_layers
from harness.layers.executions import LayerGraph, TorchExecution
from harness.layers.fp16 import fp16_layers
from harness.model import ONNX_FILENAME, load_torch_model
from harness.session import Session

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg"]


def test_real_model_in_fp16_has_no_divergent_layer_and_says_where_it_is_worst(repository, photo):
    found = fp16_layers(repository / "classifier" / ONNX_FILENAME, [photo(n) for n in PHOTOS], Session(repository).recipe())
    assert found.images == len(PHOTOS) and found.first_divergent_layer is None
    assert 0 < found.output_rel_rms <= found.worst_rel_rms < 0.05  # fp16 rounding, below the layer tolerance
    assert "builds up over the layers" in found.sentence() and found.worst_layer in found.sentence()


def test_planted_overflow_in_the_torch_model_is_named(repository, photo):
    """The classifier's weights and bias x 2^13 in both models (exact in fp32): its fp16 output overflows."""
    graph = LayerGraph.from_onnx(repository / "classifier" / ONNX_FILENAME)

    def planted(half: bool):
        net = load_torch_model()
        with torch.no_grad():
            net._fc.weight.mul_(2.0 ** 13)
            net._fc.bias.mul_(2.0 ** 13)
        return net.half() if half else net

    executions = [TorchExecution("torch", graph, planted(False)), TorchExecution("torch-fp16", graph, planted(True))]
    recipe = Session(repository).recipe()
    inputs = [(n, recipe(photo(n))["input"]) for n in PHOTOS]
    (pair,), count = compare_layers(batches_of(inputs, 2), executions, graph)
    assert count == len(PHOTOS)
    assert pair.first_divergent_layer == "/net/_fc/Gemm"
    assert all(r.verdict.value != "diverged" for r in pair.rows if r.depth < graph.nodes.index("/net/_fc/Gemm"))
    assert np.isinf(pair.rows[-1].rel_rms)
