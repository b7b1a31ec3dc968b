"""What each path predicts: the reference in-process, each deployed ensemble through the server.

Whatever goes wrong with one image fails that image alone, with a one-line reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from harness.accuracy.dataset import Sample, read_sample
from harness.deployment import DeployedSide
from harness.reference import Recipe
from harness.reference.model import ReferenceModel, shape_fits
from harness.result import one_line
from harness.stage import DEFAULT_TOP_K, Stage

REFERENCE = "reference"
"""Name of the reference path in results (deployed paths are named by pipeline, dali or opencv, or by model)."""
TOP_K = DEFAULT_TOP_K
"""Classes kept per image and scored by top-k accuracy (default)."""


@dataclass(frozen=True)
class Predictions:
    """What one path predicted for each image, and why it could not for others."""

    path: str
    top_k: Mapping[str, tuple[int, ...]]
    """Image name -> the top-k class indices (:data:`TOP_K` by default), best first."""
    failed: Mapping[str, str]
    """Image name -> reason."""
    logits: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Image name -> logits (the raw output), kept for the reference (the tie margins need
    them; 4 KB an image for 1000 classes; without them every top-1 change counts as diverged),
    and for deployed paths when a task's effect needs them (``keep_outputs``: embeddings)."""


def top_k_classes(logits: np.ndarray, k: int = TOP_K) -> list[tuple[int, ...]]:
    """[batch, classes] logits -> the k best class indices of each row, best first."""
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return [tuple(int(i) for i in row) for row in order]


def _batches(samples: Sequence[Sample], size: int):
    for start in range(0, len(samples), size):
        yield samples[start:start + size]


def _read(sample: Sample) -> bytes:
    return read_sample(sample)


def predict_reference(samples: Sequence[Sample], recipe: Recipe, model: ReferenceModel, batch_size: int = 16,
                      on_image: Callable[[str], None] = lambda name: None, k: int = TOP_K) -> Predictions:
    """The training side in-process: the recipe's ``input`` stage, then the reference model,
    ``batch_size`` images at a time (default 16), keeping the ``k`` best classes. Whatever goes wrong with one image (any
    decoder's error, a pixel limit, memory, a custom recipe's wrong shape) fails that image
    alone, with a one-line reason."""
    top_k, failed, logits = {}, {}, {}
    for batch in _batches(samples, batch_size):
        names, inputs = [], []
        for sample in batch:
            try:
                model_input = recipe(_read(sample))[Stage.INPUT]
                if model.input_shape and not shape_fits(tuple(model_input.shape), model.input_shape):
                    raise ValueError(f"reference {recipe.name} made a {list(model_input.shape)} model input; "
                                     f"the classifier takes {list(model.input_shape)}")
                inputs.append(model_input)
                names.append(sample.name)
            except Exception as exc:
                failed[sample.name] = _reason(exc)
        if inputs:
            batch_logits = model.logits(np.stack(inputs))
            top_k.update(zip(names, top_k_classes(batch_logits, k)))
            logits.update(zip(names, batch_logits.astype(np.float32)))
        for sample in batch:
            on_image(sample.name)
    return Predictions(REFERENCE, top_k, failed, logits)


def predict_deployed(samples: Sequence[Sample], side: DeployedSide, batch_size: int = 8,
                     on_image: Callable[[str], None] = lambda name: None, k: int = TOP_K,
                     keep_outputs: bool = False) -> Predictions:
    """One deployed model through the server, ``batch_size`` images a request (default 8; one
    for a model that does not batch), named by the deployment's label. The side's policy
    holds: a rejected request is sent again one image at a time, so a bad image fails
    alone; a server that stops answering ends the run (:class:`harness.errors.ServerStopped`).
    ``keep_outputs``: keep every image's raw output (a task whose effect needs them: embeddings)."""
    top_k, failed, outputs = {}, {}, {}
    size = side.deployment.request.max_images or batch_size
    for batch in _batches(samples, size):
        readable = {}
        for sample in batch:
            try:
                readable[sample.name] = _read(sample)
            except OSError as exc:
                failed[sample.name] = _reason(exc)
        if readable:
            scores, why = side.scores(list(readable), list(readable.values()))
            top_k.update({name: top_k_classes(row[None], k)[0] for name, row in scores.items()})
            if keep_outputs:
                outputs.update({name: np.asarray(row, np.float32) for name, row in scores.items()})
            failed.update(why)
        for sample in batch:
            on_image(sample.name)
    return Predictions(side.deployment.label, top_k, failed, outputs)


def _reason(exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {exc.filename}"
    if isinstance(exc, OSError):
        return f"unreadable: {exc.strerror or exc}"
    return one_line(exc)
