"""Segmentation's building blocks, for the task layer to register: the segmenter out of its
wheel (:mod:`.model`), the postprocessings shared by the served model and the reference
(:mod:`.postprocess`) and two sides' masks compared (:mod:`.compare`)."""
