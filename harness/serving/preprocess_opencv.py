"""preprocess_opencv: the training-style OpenCV preprocessing as a Triton model."""

from __future__ import annotations

from harness.preprocessing import TAP_TENSORS, ImageError, opencv
from harness.serving.preprocess import STAGE_OF_TENSOR, PreprocessModel


class TritonPythonModel(PreprocessModel):
    def setup(self, spec):
        opencv.check_supported(spec)

    def preprocess(self, images, outputs):
        stages = [STAGE_OF_TENSOR[name] for name in outputs]
        results = []
        for data in images:
            try:
                by_stage = opencv.run(data, self.spec, stages)
                results.append({TAP_TENSORS[s]: v for s, v in by_stage.items()})
            except ImageError as exc:
                results.append(exc)
        return results
