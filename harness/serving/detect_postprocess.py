"""detect_postprocess: the last step of detect_dali and detect_opencv, in both profiles.

A detector's raw output (``PROBABILITY``, the DB probability map [1, H, W] per image) and
what the preprocessing did to the image (``GEOMETRY``, INT32 [8]:
:meth:`harness.geometry.Geometry.from_tensor`) -> the boxes in the source image's
pixels: ``BOXES`` FP32 [N, 4, 2] (x, y corners clockwise from the top left) and ``SCORES``
FP32 [N]. The postprocessor is the spec's ``[postprocess]`` table
(:func:`harness.detection.postprocess.from_table`), the spec the config's ``spec`` parameter
names (``detection.toml``), so the server and the harness's reference run the same code
with the same parameters. The map reaches the postprocessor under the name the detector
gives it (the ``model_output`` parameter: ``fetch_name_0``), the name a ``[postprocess]``
``output`` key refers to.

Each request is answered on its own (images hold different numbers of boxes); a request of
several images answers them stacked when their box counts agree, and is refused otherwise
(send one image per request, as the harness and the load tests do). A malformed GEOMETRY or
map fails only its own request, with ``INVALID_ARGUMENT``.

It also answers its two inputs unchanged, as outputs of the same names, when a request asks
for them: the ensembles' ``PROBABILITY`` and ``GEOMETRY`` outputs come from this, their last
step. Triton's ensemble scheduler prunes, for a request that does not ask for an ensemble
output, the step making it once none of that step's outputs is asked for, without looking
whether a later step consumes it: with the detector's map as an ensemble output of the
detector's step, a request for ``BOXES`` alone pruned the detector and never finished
("unexpected deadlock, at least one output is not set"; tritonserver 2.51). Only outputs asked
for are made (an ensemble step is asked for all of its outputs).
"""

from __future__ import annotations

import numpy as np

from harness.detection.postprocess import from_table
from harness.serving.postprocess_step import PostprocessStep

MAP_INPUT = "PROBABILITY"
BOXES = "BOXES"
SCORES = "SCORES"


class TritonPythonModel(PostprocessStep):
    map_input, maps_word, makes = MAP_INPUT, "probability maps", "boxes of the detector's output"

    def postprocessor(self, table):
        return from_table(table)

    def one(self, prob, geometry):
        return self.postprocess({self.model_output: prob}, geometry)

    def outputs(self, found):
        counts = sorted({len(d) for d in found})
        if len(counts) > 1:
            return (f"the {len(found)} images of this request hold different numbers of boxes "
                    f"({', '.join(map(str, counts))}): send one image per request")
        return {
            BOXES: lambda: np.stack([d.quads.astype(np.float32) for d in found]),
            SCORES: lambda: np.stack([d.scores.astype(np.float32) for d in found]),
        }

