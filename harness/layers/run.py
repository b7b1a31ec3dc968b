"""One ``harness layers`` run: images -> model inputs -> executions -> :class:`LayersResult`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from harness.layers.compare import LayersResult, LayerTolerance, batches_of, compare_layers
from harness.layers.executions import LayerGraph, open_executions
from harness.layers.inputs import image_inputs

DEFAULT_BATCH = 4
"""Images per forward pass: the activations of one batch of every execution are all a run holds."""


def run_layers(images: Path, onnx_path: Path, executions: list[str], recipe: Callable[[bytes], dict],
               tolerance: LayerTolerance = LayerTolerance(), layers: list[str] | None = None,
               fp16_path: Path | None = None, batch: int = DEFAULT_BATCH, limit: int | None = None,
               progress: Callable[[int], None] = lambda n: None, torch_model: str | None = None,
               torch_prefix: str | None = None) -> LayersResult:
    """Compare ``executions`` (the first is the reference) of ``onnx_path`` layer by layer on
    the images of ``images`` preprocessed by ``recipe`` (at most ``limit``, default all).
    ``layers`` restricts the comparison (default all); ``fp16_path`` is the fp16 ONNX
    (default: converted here as ``harness model export --fp16`` does); ``torch_model`` and
    ``torch_prefix`` as :func:`~harness.layers.executions.open_executions` takes them. Raises
    :class:`~harness.layers.executions.LayersError` / :class:`~harness.errors.UsageError`
    for a model, layer, execution or image directory it cannot use."""
    graph = LayerGraph.from_onnx(onnx_path)
    if layers:
        graph.check_names(layers)
    failed: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    with open_executions(executions, onnx_path, graph, fp16_path, torch_model, torch_prefix) as opened:
        inputs = batches_of(image_inputs(images, recipe, failed, limit, skipped), batch)
        pairs, count = compare_layers(inputs, opened, graph, tolerance, layers, progress)
        unmatched = sorted(getattr(next((e for e in opened if e.name == "torch"), None), "unmatched_modules", ()))
    return LayersResult(str(onnx_path), tuple(executions), count, tuple(failed), tolerance, pairs, tuple(unmatched),
                        tuple(skipped))
