"""classifier (cpu profile): the classifier's ONNX run by ONNX Runtime, in place of the
TensorRT engine of the GPU profile. Same tensor names, same labels.

Every model a client can reach validates its input's size: Triton checks the fixed dimensions
and the batch, the engine's optimization profile bounds each free (-1) dimension in the GPU
profile, and here :func:`profile_ceiling` does (the recognizer called with ``x [8, 3, 48, 20000]``
ran 54 s and answered 1.5 GB before)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from harness.engine_input import version_file
from harness.model import ONNX_FILENAME, onnx_run_options, onnx_session
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of


def profile_ceiling(config: dict, repository: Path) -> tuple[tuple[int, int, str], ...]:
    """(axis, the largest size, why) of each free (-1) dimension of the model's input: what its GPU
    engine's profile takes, from the same spec keys docker/build_engine.py builds ``maxShapes``
    from (a limit_side detector's ``[resize] max_side`` for its height and width, the recognizer's
    ``[recognition] max_width`` for its width). Axes count the batch as 0."""
    dims = [int(d) for d in config["input"][0]["dims"]]
    free = [axis + 1 for axis, d in enumerate(dims) if d == -1]
    if not free:
        return ()
    spec = load_spec(repository.parent / spec_name_of(config))
    if len(free) == 2 and spec.preprocess.resize.mode == "limit_side":
        side = spec.preprocess.resize.max_side
        return tuple((axis, side, "the spec's [resize] max_side") for axis in free)
    if len(free) == 1 and spec.recognition is not None:
        from harness.ocr.recognition import parameters

        return ((free[0], parameters(spec.recognition).max_width, "the spec's [recognition] max_width"),)
    return ()  # an input no engine profile of this project bounds (a user's model): Triton's own checks only


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        threads = int(params.get("intra_op_threads", {}).get("string_value", "0"))
        # Each version Triton loads (the config's version_policy) runs its own ONNX.
        onnx = version_file(Path(args["model_repository"]), int(args["model_version"]), ONNX_FILENAME)
        self.session = onnx_session(onnx, threads)
        self.run_options = onnx_run_options()  # one large input does not hold the server's memory for good
        self.input_name = config["input"][0]["name"]
        self.outputs = [o["name"] for o in config["output"]]
        self.ceiling = profile_ceiling(config, Path(args["model_repository"]))

    def execute(self, requests):
        # One ONNX Runtime call for the whole dynamic batch (the requests within the profile), then split per request.
        inputs = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        refusals = [self._refusal(x) for x in inputs]
        valid = [x for x, refusal in zip(inputs, refusals) if refusal is None]
        results = self.session.run(self.outputs, {self.input_name: np.concatenate(valid)}, self.run_options) if valid else []
        responses, start = [], 0
        for x, refusal in zip(inputs, refusals):
            if refusal is not None:
                responses.append(invalid_argument(refusal))
                continue
            stop = start + len(x)
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(out[start:stop])) for name, out in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = stop
        return responses

    def _refusal(self, x: np.ndarray) -> str | None:
        for axis, largest, why in self.ceiling:
            if x.shape[axis] > largest:
                return (f"{self.input_name} {list(x.shape)}: dimension {axis} is {x.shape[axis]}, beyond the {largest} this "
                        f"model's profile takes ({why})")
        return None
