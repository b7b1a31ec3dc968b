"""segment_preprocess_dali_stages: the DALI pipeline of ../../segmentation.toml with every
stage as an output (taps=True) and the GEOMETRY last, GPU decode."""

from nvidia.dali.plugin.triton import autoserialize

from harness.preprocessing.dali_graph import production_pipeline

preprocess = autoserialize(production_pipeline(__file__, taps=True, geometry=True))
