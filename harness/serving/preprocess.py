"""Shared plumbing of the preprocessing models: requests in, per-image work, responses out.

A request's ``IMAGE`` is a [batch, bytes] UINT8 tensor (files zero padded to one length);
``allow_ragged_batch`` lets dynamic batching hand over requests of different lengths at
once. All their images are preprocessed together; an image that fails fails its own
request with a one-line reason (and, in ``preprocess_dali``, its whole batch, as the DALI
backend does: see :mod:`harness.serving.preprocess_dali_cpu`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.postprocessing import output_ceiling
from harness.preprocessing import TAP_TENSORS, ImageError
from harness.preprocessing.image_check import inspect
from harness.segmentation.postprocess import check_output_size
from harness.spec import Preprocess, load_spec, spec_name_of

STAGE_OF_TENSOR = {tensor: stage for stage, tensor in TAP_TENSORS.items()}


class PreprocessModel:
    """Base of the preprocessing models; subclasses implement :meth:`preprocess`."""

    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.model_dir = Path(args["model_repository"])
        spec = load_spec(self.model_dir.parent / spec_name_of(self.config))
        self.spec = spec.preprocess
        self.output_ceiling = output_ceiling(spec.postprocess)
        self.output_dtypes = {
            o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in self.config["output"]
        }
        self.setup(self.spec)

    def setup(self, spec: Preprocess) -> None:
        """Prepare to preprocess (build a pipeline, check the spec is supported)."""

    def preprocess(self, images: list[np.ndarray], outputs: list[str]) -> list[dict[str, np.ndarray] | ImageError]:
        """Each image's requested output tensors (by tensor name), or the error it raised."""
        raise NotImplementedError

    def execute(self, requests):
        images, owners = [], []
        for r, request in enumerate(requests):
            batch = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            images.extend(batch)
            owners.extend([r] * len(batch))
        wanted = [self._requested(request) for request in requests]
        union = sorted({name for names in wanted for name in names})
        results: list = [_refusal(data, self.output_ceiling) for data in images]
        todo = [i for i, res in enumerate(results) if res is None]
        for i, res in zip(todo, self.preprocess([images[i] for i in todo], union) if todo else []):
            results[i] = res
        return [self._respond(wanted[r], [res for res, o in zip(results, owners) if o == r]) for r in range(len(requests))]

    def _requested(self, request) -> list[str]:
        names = request.requested_output_names()
        return [n for n in self.output_dtypes if n in names] if names else list(self.output_dtypes)

    def _respond(self, names: list[str], results):
        errors = [(i, res) for i, res in enumerate(results) if isinstance(res, ImageError)]
        if errors:
            return error_response(errors[0][1], errors[0][0], len(results))
        tensors = []
        for name in names:
            arrays = [res[name] for res in results]
            if len({a.shape for a in arrays}) > 1:
                return invalid_argument(f"{name} has a different shape for each image of this request; request it "
                                        "one image at a time")
            tensors.append(pb_utils.Tensor(name, np.stack(arrays).astype(self.output_dtypes[name], copy=False)))
        return pb_utils.InferenceResponse(output_tensors=tensors)


def check_output_ceiling(data: np.ndarray, ceiling: int | None) -> None:
    """:class:`ImageError` when the image's header declares a source larger than the pipeline
    answers (``ceiling``: :func:`harness.postprocessing.output_ceiling`): refused by its first
    step, before any decode or model (at the postprocessing, a 4 KB PNG just over it cost 10.5 s
    and +2.4 GB to refuse)."""
    if ceiling is None:
        return
    header = inspect(data)
    try:
        check_output_size((header.height, header.width), ceiling)
    except ValueError as exc:
        raise ImageError(str(exc)) from None


def _refusal(data: np.ndarray, ceiling: int | None) -> ImageError | None:
    try:
        check_output_ceiling(data, ceiling)
    except ImageError as exc:
        return exc
    return None


def error_response(exc: Exception, index: int, count: int):
    """The response failing a request because its image ``index`` (of ``count``) is bad:
    the client's input, so ``INVALID_ARGUMENT`` (HTTP 400), not an internal error."""
    where = f"image {index} of the request: " if count > 1 else ""
    return invalid_argument(f"{where}{exc}")


def invalid_argument(message: str):
    """A response refusing the request's input (``INVALID_ARGUMENT``; HTTP 400)."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))
