"""Triton preprocessing consistency harness: the DALI/OpenCV ensemble's spec, serving code,
embedded server, and the check / diagnose / accuracy jobs. See README.md."""

import os

__version__ = "0.9.0"

MAX_IMAGE_PIXELS = 178_956_970
"""The most pixels an image may declare on any path (:mod:`harness.preprocessing.image_check`):
2 x Pillow's ``Image.MAX_IMAGE_PIXELS``, the point where Pillow itself refuses to decode."""

# OpenCV's own decode guard (read once, when cv2 is loaded; set here, before any module of the
# harness imports cv2, in every process that imports the harness: the commands, the server's
# Python-backend models): cv2.imdecode refuses what the image guard refuses even where the guard
# was not called. A value the user set stays.
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(MAX_IMAGE_PIXELS))
