"""validate_image: the first step of ``classify_dali``, in both profiles.

The DALI backend decodes a dynamic batch as one unit: one image it cannot decode fails
*every* request of that batch (dali_backend sends one error to all of them). This model
checks each request's images before they reach it (see
:func:`harness.preprocessing.image_check.validate`), so a bad image fails only its own
request, with a one-line reason, and good images pass through unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from harness.postprocessing import output_ceiling
from harness.preprocessing.image_check import VALIDATIONS, ImageError, validate
from harness.serving.preprocess import check_output_ceiling, error_response
from harness.spec import load_spec, spec_name_of


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.level = config.get("parameters", {}).get("validation", {}).get("string_value", "decode")
        if self.level not in VALIDATIONS:
            raise pb_utils.TritonModelException(f"parameter 'validation' must be one of {VALIDATIONS}, got {self.level!r}")
        self.output = config["output"][0]["name"]
        # The spec's resize: an image it would blow up beyond the pixel limit is refused too.
        spec = load_spec(Path(args["model_repository"]).parent / spec_name_of(config))
        self.resize = spec.preprocess.resize
        # A segmentation's answer ceiling: a larger source is refused here, before the decode and the model.
        self.output_ceiling = output_ceiling(spec.postprocess)

    def execute(self, requests):
        return [self._check(pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()) for request in requests]

    def _check(self, images):
        for i, data in enumerate(images):
            try:
                check_output_ceiling(data, self.output_ceiling)
                validate(data, self.level, self.resize)
            except ImageError as exc:
                return error_response(exc, i, len(images))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output, images)])
