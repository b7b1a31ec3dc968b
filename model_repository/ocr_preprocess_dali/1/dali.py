"""ocr_preprocess_dali: the recognizer's preprocessing graph of ../../ocr.toml, GPU decode.

Triton's DALI backend serializes this file when it loads the model (autoserialization); the
graph is defined once, in harness.ocr.dali_recognition, with the [recognition] table of the
spec this model's config names (its ``spec`` parameter).
"""

from nvidia.dali.plugin.triton import autoserialize

from harness.ocr.dali_recognition import served_pipeline

preprocess = autoserialize(served_pipeline(__file__))
