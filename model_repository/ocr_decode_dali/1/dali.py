"""ocr_decode_dali: the decode step of ../../detection.toml's DALI pipeline alone, GPU decode.

Triton's DALI backend serializes this file when it loads the model (autoserialization);
the pipeline itself is defined once, in harness.preprocessing.dali_graph, which reads the
spec this model's config names (its ``spec`` parameter).
"""

from nvidia.dali.plugin.triton import autoserialize

from harness.preprocessing.dali_graph import production_pipeline

preprocess = autoserialize(production_pipeline(__file__, taps=False, decode_only=True))
