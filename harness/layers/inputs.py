"""The model inputs ``harness layers`` and the fp32 fallback run on: real images through the
training recipe (the reference preprocessing), one at a time, never all held."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from harness.errors import HarnessError, UsageError
from harness.listing import InputFile, list_inputs, read_input
from harness.names import identifier


def image_inputs(directory: Path, recipe: Callable[[bytes], dict], failed: list[tuple[str, str]],
                 limit: int | None = None, skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(file name, model input [3, H, W] float32) of every image of ``directory`` (at most
    ``limit``, default all), in name order; a file the recipe refuses is appended to ``failed``
    as (name, reason). Saved model inputs are taken as they are: a ``.npz`` of ``check
    --save-tensors`` (its reference ``input``, the model input training's recipe made) or a
    ``.npy`` [3, H, W]. The folder's entries that are not inputs (:func:`harness.listing.list_inputs`)
    are appended to ``skipped`` as (name, why). Raises :class:`UsageError` when no file gave an input."""
    if not Path(directory).is_dir():
        raise UsageError(f"image directory not found: {directory}")
    given = 0
    listing = list_inputs(Path(directory))
    if skipped is not None:
        skipped.extend((s.name, s.reason) for s in listing.skipped)
    for path in (f.path for f in listing.inputs):
        if limit is not None and given >= limit:
            break
        try:
            if path.suffix == ".npz":
                from harness.check.files import load_image_tensors

                array = load_image_tensors(path).reference["input"].astype(np.float32)
            elif path.suffix == ".npy":
                array = np.load(path, allow_pickle=False).astype(np.float32)
                array = array[0] if array.ndim == 4 and array.shape[0] == 1 else array
            else:
                array = recipe(read_input(InputFile.of(path)))["input"]
        except (HarnessError, ValueError, OSError, KeyError) as exc:
            failed.append((identifier(path), str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            continue
        given += 1
        yield identifier(path), array
    if not given:
        raise UsageError(f"{directory}: no usable image ({len(failed)} file(s) could not be read as an image)")
