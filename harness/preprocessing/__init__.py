"""The deployed preprocessing, implemented once per library and driven by the spec.

Every implementation produces the same named stages, in pipeline order:

========  ============================================  =================
stage     what                                          Triton tensor
========  ============================================  =================
decode    decoded image, HWC uint8 RGB                  ``DECODED``
resize    after the resize, HWC (float32 on the wire)   ``RESIZED``
crop      after the center crop, HWC                    ``CROPPED``
input     normalized model input, CHW float32           ``INPUT``
========  ============================================  =================
"""

from typing import Any, Callable, Iterator, Mapping

from harness.preprocessing.image_check import ImageError
from harness.stage import PREPROCESS_STAGES, TAP_TENSORS, Stage

Step = Callable[..., Any]
"""One stage of one library: the previous stage's result (the file for ``decode``), then
the library's own arguments (the spec, for the pipelines) -> this stage's result."""


def run_steps(steps: Mapping[Stage, Step], x: Any, *args: Any, until: Stage = Stage.INPUT) -> Iterator[tuple[Stage, Any]]:
    """The one runner of every library's table: walk :data:`PREPROCESS_STAGES` up to
    ``until``, each step fed the previous stage's result and ``args``; yields
    ``(stage, result)`` as each is computed (lazily, so a caller can stop or check between)."""
    for stage in PREPROCESS_STAGES[:PREPROCESS_STAGES.index(until) + 1]:
        if stage not in steps:
            raise NotImplementedError(f"no {stage} step in {sorted(map(str, steps))}: every library needs one per stage")
        x = steps[stage](x, *args)
        yield stage, x


__all__ = ["ImageError", "PREPROCESS_STAGES", "TAP_TENSORS", "Step", "run_steps"]
