"""Numbers in words: how every report and conclusion writes an error or a metric."""

from __future__ import annotations

import math


def fmt(value, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits; ``-`` for None, ``inf``/``-inf``, ``0``;
    a string as it is."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"
