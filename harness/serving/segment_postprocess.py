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

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.geometry import Geometry, GeometryError
from harness.segmentation.postprocess import MASK, MATTE, SegmentationPostprocess
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of
from harness.stage import GEOMETRY_TENSOR

MAP_INPUT = "MAP"
MATTE_OUTPUT = "MATTE"
MASK_OUTPUT = "MASK"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        spec_file = Path(args["model_repository"]).parent / spec_name_of(config)
        spec = load_spec(spec_file)
        if spec.postprocess is None:
            raise pb_utils.TritonModelException(f"{spec_file} has no [postprocess] table: nothing says how to make "
                                                "a mask of the segmenter's output")
        self.postprocess = SegmentationPostprocess(spec.postprocess)
        params = config.get("parameters", {})
        self.model_output = params.get("model_output", {}).get("string_value") or MAP_INPUT

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        maps = pb_utils.get_input_tensor_by_name(request, MAP_INPUT).as_numpy()
        geometries = pb_utils.get_input_tensor_by_name(request, GEOMETRY_TENSOR).as_numpy()
        if len(maps) != len(geometries):
            return invalid_argument(f"{len(maps)} maps but {len(geometries)} geometries in one request")
        results = []
        for i, (saliency, values) in enumerate(zip(maps, geometries)):
            where = f"image {i} of the request: " if len(maps) > 1 else ""
            try:
                results.append(self.postprocess({self.model_output: saliency}, Geometry.from_tensor(values).source))
            except (GeometryError, ValueError) as exc:
                return invalid_argument(f"{where}{exc}")
        if len({r.shape for r in results}) > 1:
            return invalid_argument(f"the {len(results)} images of this request have different sizes: send one image "
                                    "per request")
        made = {
            MATTE_OUTPUT: lambda: np.stack([r[MATTE] for r in results]).astype(np.float32),
            MASK_OUTPUT: lambda: np.stack([r[MASK] for r in results]).astype(np.uint8),
            MAP_INPUT: lambda: maps,
            GEOMETRY_TENSOR: lambda: geometries,
        }
        asked = request.requested_output_names() or made
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, make()) for name, make in made.items()
                                                          if name in asked])
