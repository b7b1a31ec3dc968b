"""preprocess_opencv: the training-style OpenCV preprocessing as a Triton model."""

from __future__ import annotations

from harness.preprocessing import TAP_TENSORS, ImageError, opencv
from harness.serving.preprocess import STAGE_OF_TENSOR, PreprocessModel
from harness.stage import GEOMETRY_TENSOR, Stage


class TritonPythonModel(PreprocessModel):
    def setup(self, spec):
        opencv.check_supported(spec)

    def preprocess(self, images, outputs):
        # A detector's GEOMETRY (what the resize does to the decoded image) needs the decode.
        geometry = GEOMETRY_TENSOR in outputs
        stages = {STAGE_OF_TENSOR[name] for name in outputs if name != GEOMETRY_TENSOR} | ({Stage.DECODE} if geometry else set())
        results = []
        for data in images:
            try:
                by_stage = opencv.run(data, self.spec, stages)
                result = {TAP_TENSORS[s]: v for s, v in by_stage.items()}
                if geometry:
                    result[GEOMETRY_TENSOR] = opencv.geometry(by_stage[Stage.DECODE], self.spec)
                results.append(result)
            except ImageError as exc:
                results.append(exc)
        return results
