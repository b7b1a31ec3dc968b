"""validate_image: rejects an undecodable image before the DALI backend sees it."""

from harness.serving.validate_image import TritonPythonModel  # noqa: F401
