"""segment_postprocess: the last step of segment_dali and segment_opencv, in both profiles.

The segmenter's raw output (``MAP``, the saliency map [1, H, W] per image) and what the
preprocessing did to the image (``GEOMETRY``, INT32 [8]: its source size) -> the ``MATTE``
(FP32 [height, width], 0 to 1) and the binary ``MASK`` (UINT8, 0/1) at the source size, by
:class:`harness.segmentation.postprocess.SegmentationPostprocess` with the spec's
``[postprocess]`` table: the code the harness's reference runs. Each request is answered on
its own; several images in one request are answered stacked when their sizes agree. A
malformed map or GEOMETRY (NaN, a wrong shape) fails only its own request, with
``INVALID_ARGUMENT``. It also answers its two inputs unchanged when asked for them (see
:mod:`harness.serving.detect_postprocess` for why the ensembles need that).
"""

from __future__ import annotations

import numpy as np

from harness.segmentation.postprocess import MASK, MATTE, SegmentationPostprocess
from harness.serving.postprocess_step import PostprocessStep

MAP_INPUT = "MAP"
MATTE_OUTPUT = "MATTE"
MASK_OUTPUT = "MASK"


class TritonPythonModel(PostprocessStep):
    map_input, maps_word, makes = MAP_INPUT, "maps", "a mask of the segmenter's output"

    def postprocessor(self, table):
        return SegmentationPostprocess(table)

    def one(self, saliency, geometry):
        return self.postprocess({self.model_output: saliency}, geometry.source)

    def outputs(self, results):
        if len({r.shape for r in results}) > 1:
            return f"the {len(results)} images of this request have different sizes: send one image per request"
        return {
            MATTE_OUTPUT: lambda: np.stack([r[MATTE] for r in results]).astype(np.float32),
            MASK_OUTPUT: lambda: np.stack([r[MASK] for r in results]).astype(np.uint8),
        }
