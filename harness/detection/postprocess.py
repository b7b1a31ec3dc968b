"""What every postprocessor is: a callable from one image's named model outputs and the
preprocessing's :class:`~harness.geometry.Geometry` to :class:`Detections` in the
source image's pixels.

Built-ins (:data:`BUILTIN`) take their parameters as a frozen dataclass, the future spec's
``[postprocess]`` table (``name = "db"`` plus the fields); a user's own is any callable of
the same signature, named ``FILE.py:NAME`` (loaded like a custom reference recipe, with
``harness.reference.custom.load_object``).
"""

from __future__ import annotations

from typing import Mapping, Protocol

import numpy as np

from harness.detection.boxes import Detections
from harness.detection.db import DbPostprocess
from harness.detection.yolo import YoloPostprocess
from harness.geometry import Geometry
from harness.postprocessing import parameters


class Postprocessor(Protocol):
    """``outputs``: the model's outputs for ONE image, by tensor name, batch axis removed
    (outputs are read by name, never by position); ``geometry``: the resize that made the
    model input, to map boxes back to the source pixels."""

    def __call__(self, outputs: Mapping[str, np.ndarray], geometry: Geometry) -> Detections: ...


BUILTIN = {"db": DbPostprocess, "yolo": YoloPostprocess}
"""Name -> the postprocessor class taking that name's parameters (:data:`harness.postprocessing.PARAMETERS`)."""


def from_table(table: Mapping) -> Postprocessor:
    """A built-in postprocessor from a ``[postprocess]`` table: ``name`` and its parameters
    (:func:`harness.postprocessing.parameters` refuses unknown names and keys by name)."""
    params = parameters(table)  # first: it names what is wrong with the table
    return BUILTIN[table["name"]](params)
