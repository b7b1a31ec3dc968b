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

from harness.preprocessing.image_check import ImageError
from harness.stage import PREPROCESS_STAGES, Stage

TAP_TENSORS = {Stage.DECODE: "DECODED", Stage.RESIZE: "RESIZED", Stage.CROP: "CROPPED", Stage.INPUT: "INPUT"}
"""Stage name -> output tensor name of the preprocessing models."""

__all__ = ["ImageError", "PREPROCESS_STAGES", "TAP_TENSORS"]
