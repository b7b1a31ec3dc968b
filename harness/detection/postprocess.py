"""What every postprocessor is: a callable from one image's named model outputs and the
preprocessing's :class:`~harness.detection.geometry.Geometry` to :class:`Detections` in the
source image's pixels.

Built-ins (:data:`BUILTIN`) take their parameters as a frozen dataclass, the future spec's
``[postprocess]`` table (``name = "db"`` plus the fields); a user's own is any callable of
the same signature, named ``FILE.py:NAME`` (loaded like a custom reference recipe, with
``harness.reference.custom.load_object``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Mapping, Protocol

import numpy as np

from harness.detection.boxes import Detections
from harness.detection.db import DbParams, DbPostprocess
from harness.detection.geometry import Geometry
from harness.detection.yolo import YoloParams, YoloPostprocess


class Postprocessor(Protocol):
    """``outputs``: the model's outputs for ONE image, by tensor name, batch axis removed
    (outputs are read by name, never by position); ``geometry``: the resize that made the
    model input, to map boxes back to the source pixels."""

    def __call__(self, outputs: Mapping[str, np.ndarray], geometry: Geometry) -> Detections: ...


BUILTIN = {"db": (DbParams, DbPostprocess), "yolo": (YoloParams, YoloPostprocess)}
"""Name -> (parameter record, postprocessor class taking it)."""


def from_table(table: Mapping) -> Postprocessor:
    """A built-in postprocessor from a ``[postprocess]`` table: ``name`` and its parameters
    (unknown keys refused by name, so a typo is not silently a default)."""
    table = dict(table)
    name = table.pop("name", None)
    if name not in BUILTIN:
        raise ValueError(f"[postprocess] name must be one of {', '.join(BUILTIN)} (or FILE.py:NAME), not {name!r}")
    params_type, postprocess = BUILTIN[name]
    known = {f.name for f in fields(params_type)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"[postprocess] {name} has no parameter {', '.join(unknown)}; it has {', '.join(sorted(known))}")
    return postprocess(params_type(**{k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}))
