"""Planted faults in copies of the real classifier, built by the tests themselves (onnx helper API)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from harness.model import LOGITS

FC = "/net/_fc/Gemm"
SCALE_UP, SCALE_DOWN = "/planted/scale_up", "/planted/scale_down"
FP16_MAX = 65504.0


def fp16_fragile_head(onnx_path: Path, out: Path, up: int, weights: int) -> Path:
    """The classifier with its final Gemm between x 2^up (a Mul before it) and x 2^-(up+weights)
    (a Mul after it), its weights scaled by 2^weights and its bias by 2^(up+weights): exact in
    fp32 (powers of two), while the Gemm's output, 2^(up+weights) x the logits, overflows fp16."""
    model = onnx.load(str(onnx_path))
    graph = model.graph
    fc = next(n for n in graph.node if n.name == FC)
    assert fc.output[0] == LOGITS
    inits = {i.name: i for i in graph.initializer}
    for name, exponent in ((fc.input[1], weights), (fc.input[2], up + weights)):
        value = numpy_helper.to_array(inits[name]) * np.float32(2.0 ** exponent)
        inits[name].CopyFrom(numpy_helper.from_array(value, name))
    graph.initializer.extend([numpy_helper.from_array(np.array(2.0 ** up, np.float32), "planted_up"),
                              numpy_helper.from_array(np.array(2.0 ** -(up + weights), np.float32), "planted_down")])
    features = fc.input[0]
    up = helper.make_node("Mul", [features, "planted_up"], ["planted_features"], name=SCALE_UP)
    fc.input[0] = "planted_features"
    fc.output[0] = "planted_logits"
    down = helper.make_node("Mul", ["planted_logits", "planted_down"], [LOGITS], name=SCALE_DOWN)
    nodes = list(graph.node)
    at = nodes.index(fc)
    del graph.node[:]
    graph.node.extend([*nodes[:at], up, fc, down, *nodes[at + 1:]])
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def overflow_exponents(features_max: float, logits_min_peak: float, weights_max: float) -> tuple[int, int]:
    """(up, weights) for :func:`fp16_fragile_head`: the scaled features stay well inside fp16
    (below half its max), the scaled weights below the fp16 converter's clamp (1e4), and every
    image's scaled logits overflow (beyond twice fp16's max)."""
    up = math.floor(math.log2(FP16_MAX / 2 / features_max))
    total = math.ceil(math.log2(2 * FP16_MAX / logits_min_peak))
    weights = max(0, total - up)
    assert weights_max * 2.0 ** weights < 1e4, (weights_max, weights)
    return up, weights


def perturbed_weights(onnx_path: Path, out: Path, node: str, factor: float) -> Path:
    """The classifier with ``node``'s weight initializer multiplied by ``factor``."""
    model = onnx.load(str(onnx_path))
    target = next(n for n in model.graph.node if n.name == node)
    weight = next(i for i in model.graph.initializer if i.name == target.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(factor), weight.name))
    onnx.save(model, str(out))
    return out
