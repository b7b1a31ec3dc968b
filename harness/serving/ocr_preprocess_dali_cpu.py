"""ocr_preprocess_dali (cpu profile): the same DALI graph as the GPU model
(:mod:`harness.ocr.dali_recognition`) on the CPU, run in the Python backend because the DALI
backend needs a GPU here. One word a request, as the GPU model takes it;
the requests of a dynamic batch run as one DALI batch. Each request is checked first
(:func:`harness.ocr.dali_recognition.check_sample`): one that the ocr model could not have
sent (a region beyond the decode limit, a crop beyond its region, widths beyond the
recognizer's profile) is refused alone, with ``INVALID_ARGUMENT``."""

from __future__ import annotations

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from harness.ocr.dali_recognition import INPUTS, CpuRecognitionRunner, check_sample
from harness.ocr.recognition import parameters
from harness.serving.preprocess import invalid_argument
from harness.spec import load_spec, spec_name_of


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        spec = load_spec(Path(args["model_repository"]).parent / spec_name_of(config))
        threads = int(config.get("parameters", {}).get("num_threads", {}).get("string_value", "1"))
        self.recognition = parameters(spec.recognition)
        self.runner = CpuRecognitionRunner(self.recognition, config["max_batch_size"], threads)

    def execute(self, requests):
        samples = {name: [] for name in INPUTS}
        responses = [self._refusal(request, samples) for request in requests]
        results = iter(self.runner.run(samples) if samples["IMAGE"] else ())
        for i, response in enumerate(responses):
            if response is None:
                crop, x = next(results)
                responses[i] = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("CROP", crop[None]),
                                                                          pb_utils.Tensor("INPUT", x[None])])
        return responses

    def _refusal(self, request, samples):
        """The refusal of a request the ocr model could not have sent, or None (its word added to ``samples``)."""
        arrays = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in INPUTS}
        if any(len(a) != 1 for a in arrays.values()):
            return invalid_argument("send one word per request (each word's input has its own width)")
        try:
            check_sample(*(arrays[name][0] for name in INPUTS), self.recognition)
        except ValueError as exc:
            return invalid_argument(str(exc))
        for name, array in arrays.items():
            samples[name].append(array[0])
        return None
