"""segment_preprocess_dali: the DALI pipeline of ../../segmentation.toml (taps=False), GPU
decode, answering the GEOMETRY (the source size) after the model input.

Triton's DALI backend serializes this file when it loads the model (autoserialization);
the pipeline itself is defined once, in harness.preprocessing.dali_graph.
"""

from nvidia.dali.plugin.triton import autoserialize

from harness.preprocessing.dali_graph import production_pipeline

preprocess = autoserialize(production_pipeline(__file__, taps=False, geometry=True))
