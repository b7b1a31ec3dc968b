"""detect_validate_image: validate_image with the detector's spec (detection.toml)."""

from harness.serving.validate_image import TritonPythonModel  # noqa: F401
