"""segment_preprocess_opencv: Python-backend entry point; the model lives in the harness package."""

from harness.serving.preprocess_opencv import TritonPythonModel  # noqa: F401
