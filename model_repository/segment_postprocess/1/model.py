"""segment_postprocess: Python-backend entry point; the model lives in the harness package."""

from harness.serving.segment_postprocess import TritonPythonModel  # noqa: F401
