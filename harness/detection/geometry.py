"""Moved to :mod:`harness.geometry` (the spec reads it: it sits below the detection package)."""

from harness.geometry import *  # noqa: F401,F403
from harness.geometry import Geometry, GeometryError, Letterbox, LimitSide, geometry, letterbox_padding  # noqa: F401
