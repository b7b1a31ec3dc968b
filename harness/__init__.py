"""Triton preprocessing consistency harness: the DALI/OpenCV ensemble's spec, serving code,
embedded server, and the check / diagnose / accuracy jobs. See README.md."""

__version__ = "0.1.0"
