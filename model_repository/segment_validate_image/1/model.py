"""segment_validate_image: validate_image with the segmenter's spec (segmentation.toml)."""

from harness.serving.validate_image import TritonPythonModel  # noqa: F401
