"""ocr_opencv_taps: Python-backend entry point; the model lives in the harness package."""

from harness.serving.ocr import TritonPythonModel  # noqa: F401
