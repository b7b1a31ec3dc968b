"""What the search computes once and reuses: decoded images (most hypotheses change a later
stage than decoding) and the model's logits per input tensor (a change that leaves the model
input as it was does not run the model again)."""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable, Iterator

import numpy as np

from harness.reference import Recipe
from harness.reference.model import ReferenceModel

DECODED_SETTINGS = 2
"""Decoded images are kept for this many (library, decode switches) settings at most."""
MODEL_BATCH = 8


class DecodedImages:
    """Decoded images per (library, decode switches), for the :data:`DECODED_SETTINGS` most
    recently used settings."""

    def __init__(self, settings: int = DECODED_SETTINGS):
        self.settings = settings
        self._stores: dict[tuple, dict[int, object]] = {}

    def serve(self, recipe, key: tuple):
        """``recipe`` with its decode step served from the store of ``key`` (shared by every
        setting that decodes alike). The recipe's own ``__call__`` runs unchanged; recipes
        that do not decode through the ``decode`` hook (DALI runs its whole graph at once)
        are returned as they are."""
        if type(recipe).__call__ is not Recipe.__call__ or "decode" in vars(recipe):  # or served already
            return recipe
        store = self._stores.pop(key, {})
        self._stores[key] = store  # most recently used last
        while len(self._stores) > self.settings:
            self._stores.pop(next(iter(self._stores)))
        decode = recipe.decode

        def cached(data: bytes):
            if id(data) not in store:  # the deployed bytes objects live as long as the diagnoser
                store[id(data)] = decode(data)
            return store[id(data)]

        recipe.decode = cached
        return recipe

    def clear(self) -> None:
        self._stores.clear()


class LogitsCache:
    """The model's logits per (fp16, input tensor), keyed by a hash of the tensor's bytes."""

    def __init__(self):
        self._logits: dict[tuple[bool, tuple, bytes], np.ndarray] = {}

    def logits(self, fp16: bool, model: ReferenceModel, inputs: list[np.ndarray],
               map_: Callable[[Callable, Iterable], Iterator] = map) -> tuple[list[np.ndarray], int]:
        """(the logits of each input, how many inputs were new), running the model only on
        inputs not seen before, :data:`MODEL_BATCH` at a time, the batches through ``map_``
        (a thread pool's ``map`` runs them in parallel). Inputs of different sizes (a detector's)
        are batched with their own size only."""
        keys = [(fp16, x.shape, hashlib.blake2b(x.tobytes(), digest_size=16).digest()) for x in inputs]
        new = list({k: x for k, x in zip(keys, inputs) if k not in self._logits}.items())
        by_shape: dict[tuple, list] = {}
        for item in new:
            by_shape.setdefault(item[1].shape, []).append(item)
        chunks = [group[s:s + MODEL_BATCH] for group in by_shape.values() for s in range(0, len(group), MODEL_BATCH)]
        for chunk, outs in zip(chunks, map_(lambda c: model.logits(np.stack([x for _, x in c])), chunks)):
            for (k, _), out in zip(chunk, outs):
                self._logits[k] = out
        return [self._logits[k] for k in keys], len(new)


class CachedModel(ReferenceModel):
    """``model`` answering through a :class:`LogitsCache`: the outputs check's read of the
    deployed side computed are those the search's baseline, and check's comparison of the
    corrected spec, find there (the same input, the same output, computed once)."""

    def __init__(self, model: ReferenceModel, cache: LogitsCache):
        self.model, self.cache = model, cache
        self.name, self.input_shape = model.name, model.input_shape

    def logits(self, batch: np.ndarray) -> np.ndarray:
        return np.stack(self.cache.logits(False, self.model, list(batch))[0])
