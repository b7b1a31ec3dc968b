"""DALI graph arithmetic the operations' DALI kernels and the DALI graph share (sides and
roundings as float64 nodes). Imports DALI: only a DALI kernel, or a module of the DALI graph,
imports it."""

from __future__ import annotations

import nvidia.dali.fn as fn
import nvidia.dali.math as dmath
import nvidia.dali.types as types


def sides(image):
    """(height, width) of an HWC image as float64 nodes."""
    shape = fn.cast(image.shape(), dtype=types.FLOAT64)
    return shape[0], shape[1]


def round_half_even(x):
    """Python's ``round`` of a non-negative float64 node."""
    q = dmath.floor(x)
    r = x - q
    odd = q - 2.0 * dmath.floor(q / 2.0)
    return q + (r > 0.5) + (r == 0.5) * odd


def rounded(x, rounding: str):
    """A non-negative float64 node rounded as ``rounding`` says (``auto`` is DALI's: half up)."""
    if rounding == "floor":
        return dmath.floor(x)
    if rounding == "half_even":
        return round_half_even(x)
    return dmath.floor(x + 0.5)
