"""The deployed side: every stage read from the server, and each stage run alone.

Stages come from the server itself (the preprocessing taps model, then the production
ensemble for the output), never from a re-implementation. For isolation, the deployed
implementation of one stage is run in-process on the reference's previous stage: the
same DALI graph pieces on the CPU (or the same OpenCV functions); for the model stage,
the reference's input is sent to the server's classifier.
"""

from __future__ import annotations

import numpy as np

from harness.preprocessing import opencv
from harness.spec import Preprocess
from harness.stage import Stage


class OpenCVStageRunner:
    """One stage of the deployed OpenCV pipeline alone."""

    def __init__(self, p: Preprocess):
        self.p = p

    def run(self, stage: Stage, image: np.ndarray) -> np.ndarray:
        return opencv.STEPS[stage](image, self.p)


def stage_runner(pipeline: str, p: Preprocess):
    """The in-process runner of single deployed stages for a pipeline (one per thread)."""
    if pipeline == "dali":
        from harness.preprocessing.dali_graph import CpuStageRunner

        return CpuStageRunner(p)
    return OpenCVStageRunner(p)
