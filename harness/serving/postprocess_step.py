"""The last step of an ensemble that postprocesses a raw map in the server (detect_postprocess,
segment_postprocess): what the two have in common.

The step reads the spec its config's ``spec`` parameter names and builds the postprocessor of
its ``[postprocess]`` table (the code the harness's reference runs), takes the raw map under
the name its model gives it (the ``model_output`` parameter), answers each image of a request
from the map and ``GEOMETRY``, and answers its two inputs unchanged when asked for them
(:mod:`harness.serving.detect_postprocess` says why the ensembles need that). A malformed map or
GEOMETRY fails only its own request, with ``INVALID_ARGUMENT``; so does one that could not come
from its ensemble (:func:`check_map`: a source beyond the decode limit, a map that does not cover
the model input it describes), so calling the step directly costs no more than calling its
ensemble. Only outputs asked for are made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import triton_python_backend_utils as pb_utils

from harness import MAX_IMAGE_PIXELS
from harness.geometry import Geometry, GeometryError
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of
from harness.stage import GEOMETRY_TENSOR


class PostprocessStep:
    """A Python-backend model answering a map and its GEOMETRY with the spec's postprocessing.
    A subclass names its map input and says what its postprocessor makes of one image
    (:meth:`postprocessor`, :meth:`one`) and how a request's images become its outputs
    (:meth:`outputs`)."""

    map_input: str
    """The map's input name (and the output answering it unchanged)."""
    maps_word: str
    """The maps as an error message names them ("probability maps")."""
    makes: str
    """What the postprocessing makes, for the error of a spec without it ("boxes of the detector's output")."""

    def postprocessor(self, table: dict) -> Callable:
        raise NotImplementedError

    def one(self, raw: np.ndarray, geometry: Geometry) -> Any:
        """One image's result (ValueError or GeometryError: its request is refused)."""
        raise NotImplementedError

    def outputs(self, results: list) -> dict[str, Callable[[], np.ndarray]] | str:
        """Output name -> how to make it from the request's results, or why they cannot be stacked."""
        raise NotImplementedError

    def initialize(self, args):
        config = json.loads(args["model_config"])
        spec_file = Path(args["model_repository"]).parent / spec_name_of(config)
        spec = load_spec(spec_file)
        if spec.postprocess is None:
            raise pb_utils.TritonModelException(f"{spec_file} has no [postprocess] table: nothing says how to make "
                                                f"{self.makes}")
        self.postprocess = self.postprocessor(spec.postprocess)
        params = config.get("parameters", {})
        self.model_output = params.get("model_output", {}).get("string_value") or self.map_input

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        maps = pb_utils.get_input_tensor_by_name(request, self.map_input).as_numpy()
        geometries = pb_utils.get_input_tensor_by_name(request, GEOMETRY_TENSOR).as_numpy()
        if len(maps) != len(geometries):
            return invalid_argument(f"{len(maps)} {self.maps_word} but {len(geometries)} geometries in one request")
        results = []
        for i, (raw, values) in enumerate(zip(maps, geometries)):
            where = f"image {i} of the request: " if len(maps) > 1 else ""
            try:
                geometry = Geometry.from_tensor(values)
                check_map(raw, geometry, self.map_input)
                results.append(self.one(raw, geometry))
            except (GeometryError, ValueError) as exc:
                return invalid_argument(f"{where}{exc}")
        made = self.outputs(results)
        if isinstance(made, str):
            return invalid_argument(made)
        made = {**made, self.map_input: lambda: maps, GEOMETRY_TENSOR: lambda: geometries}
        asked = request.requested_output_names() or made
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, make()) for name, make in made.items()
                                                          if name in asked])


def check_map(raw: np.ndarray, geometry: Geometry, name: str) -> None:
    """ValueError unless ``geometry`` describes an image a decoder of the ensemble would take (its
    source and its model input within :data:`harness.MAX_IMAGE_PIXELS`) and ``raw`` is one
    [1, H, W] map that covers the model input it describes: no larger than it, the same aspect
    ratio within one map pixel (a map at a fraction of the input's resolution is scaled up by the
    postprocessor)."""
    for what, (height, width) in (("source", geometry.source), ("model input", geometry.input)):
        if height * width > MAX_IMAGE_PIXELS:
            raise ValueError(f"{GEOMETRY_TENSOR} describes a {width}x{height} {what}, beyond the {MAX_IMAGE_PIXELS / 1e6:.0f} "
                             "megapixels any image of the ensemble may have")
    if raw.ndim != 3 or raw.shape[0] != 1 or 0 in raw.shape:
        raise ValueError(f"{name} must be one [1, H, W] map per image, got {list(raw.shape)}")
    (map_h, map_w), (in_h, in_w) = raw.shape[1:], geometry.input
    scale = in_h / map_h
    if map_h > in_h or map_w > in_w or abs(map_w * scale - in_w) > scale:
        raise ValueError(f"a {map_w}x{map_h} {name} map does not cover the {in_w}x{in_h} model input "
                         f"{GEOMETRY_TENSOR} describes (source {geometry.source[1]}x{geometry.source[0]})")
