"""Paired tests on per-image outcomes of two paths: whether one path gets right images the
other gets wrong more often than chance would. Pure functions of boolean arrays, shared by
every task's effect on a labeled set (classification's top-1, detection's per-image result)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on the images exactly one of two paths classifies correctly."""

    b: int
    """Images the reference gets right and the deployed path wrong."""
    c: int
    """Images the reference gets wrong and the deployed path right."""
    p_value: float
    """Two-sided exact binomial test of b against b + c trials at 1/2; 1.0 when b + c = 0."""

    def to_dict(self) -> dict:
        return {"b": self.b, "c": self.c, "p_value": self.p_value}


def mcnemar_exact(reference_correct: np.ndarray, deployed_correct: np.ndarray) -> McNemar:
    from scipy.stats import binomtest

    reference_correct, deployed_correct = np.asarray(reference_correct, bool), np.asarray(deployed_correct, bool)
    b = int(np.sum(reference_correct & ~deployed_correct))
    c = int(np.sum(~reference_correct & deployed_correct))
    p = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
    return McNemar(b, c, float(min(1.0, p)))
