"""Per-stage tolerances: which :class:`~harness.tolerance.Tolerance` each stage is judged by.

A stage of one image is ``equal`` when both sides hold identical values, ``close`` when at
most ``max_fraction`` of the elements differ by more than ``atol + rtol * |reference|``
and the mean absolute error is within ``mean_atol``, and ``diverged`` otherwise (or when
the shapes differ, or a value is not finite).

Two rules (docs/gpu.md gives every number with its source):

- the **decoder rule** (:data:`DEFAULT_TOLERANCES`, what ``check``, ``diagnose`` and
  ``preflight`` judge two *implementations* by, e.g. nvJPEG against libjpeg-turbo): by
  distribution, not by the worst pixel. An image stage is close when its mean error is
  within 1 level (DALI's own test of its ``mixed`` decoder with fancy upsampling against
  its CPU decoder, ``eps=1``) and at most 0.1% of its values are more than 4 levels off
  (p99.9 within 4 levels: a 1-level IDCT error, what IEEE 1180 allows a JPEG IDCT, is up to
  3 levels in RGB after JFIF colour conversion, plus 1 for the stage's own rounding);
- the **drift rule** (:data:`DRIFT_TOLERANCES`, ``tolerances_for(..., drift=True)``: one
  deployment against its own record) holds every value within one level, as the harness
  did for everything before the decoder rule.

A spec overrides the decoder rule per stage::

    [tolerances.resize]
    atol = 2
    mean_atol = 0.5
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from harness.spec import Preprocess, SpecError
from harness.stage import IMAGE_STAGES, Stage
from harness.tolerance import Tolerance

LEVELS_BEYOND = 4.0
"""The decoder rule's bound on an image stage's p99.9, in 8-bit levels (see the module doc)."""
MEAN_LEVELS = 1.0
"""The decoder rule's bound on an image stage's mean error: DALI's test ``eps`` of 1."""
TAIL = 0.001
"""The fraction of values the decoder rule lets exceed :data:`LEVELS_BEYOND`."""

DEFAULT_TOLERANCES = {
    # The decoder rule. Decode, resize and crop alike: a decoder difference reaches the
    # resized and cropped pixels almost unchanged (bilinear resize averages neighbours).
    Stage.DECODE: Tolerance(atol=LEVELS_BEYOND, max_fraction=TAIL, mean_atol=MEAN_LEVELS),
    Stage.RESIZE: Tolerance(atol=LEVELS_BEYOND, max_fraction=TAIL, mean_atol=MEAN_LEVELS),
    Stage.CROP: Tolerance(atol=LEVELS_BEYOND, max_fraction=TAIL, mean_atol=MEAN_LEVELS),
    # "input": the crop's rule in normalized units, see tolerances_for().
    # Logits: atol stays 0.5, the tie margin (harness.compare.ties); a 1-level decoder
    # difference (Pillow's YCbCr->RGB against libjpeg's, on the corpus) moves up to 12% of
    # EfficientNet-Lite0's logits beyond it, by up to 1.24, mean 0.26: about twice that.
    Stage.OUTPUT: Tolerance(atol=0.5, max_fraction=0.25, mean_atol=0.5),
}

DRIFT_TOLERANCES = {
    # Every value within one level (8-bit rounding) and the logits within 0.5: what one
    # deployment may change between two runs of the same inputs.
    Stage.DECODE: Tolerance(atol=1),
    Stage.RESIZE: Tolerance(atol=1),
    Stage.CROP: Tolerance(atol=1),
    Stage.OUTPUT: Tolerance(atol=0.5),
}


def tolerances_for(p: Preprocess, overrides: Mapping[str, Mapping[str, float]] = {},
                   drift: bool = False) -> dict[str, Tolerance]:
    """The decoder rule with the spec's overrides, or the drift rule (``drift``: overrides
    do not apply). ``input`` gets the last image stage's (``crop``'s) rule in normalized
    units (levels / std); an image stage without a rule of its own, its previous stage's."""
    rules = DRIFT_TOLERANCES if drift else DEFAULT_TOLERANCES
    tolerances = {}
    for stage in (*IMAGE_STAGES, Stage.OUTPUT):  # so that a new image stage needs no rule written here
        tolerances[stage] = rules.get(stage) or tolerances[stage.previous]
    if not drift:
        for stage, values in overrides.items():
            if stage == Stage.INPUT:
                continue
            if stage not in tolerances:
                raise SpecError(f"[tolerances.{stage}]: no such stage; stages: {', '.join([*tolerances, 'input'])}")
            tolerances[stage] = _replace(tolerances[stage], stage, values)
    _, std = p.normalize.mean_std_in_pixels()
    image, scale = tolerances[Stage.INPUT.previous], 1.0 / min(std)
    # float32 normalization differs by an ulp or so between libraries: add a hair.
    tolerances[Stage.INPUT] = dataclasses.replace(
        image, atol=image.atol * scale * 1.001 + 1e-5,
        mean_atol=None if image.mean_atol is None else image.mean_atol * scale * 1.001)
    if not drift and Stage.INPUT in overrides:
        tolerances[Stage.INPUT] = _replace(tolerances[Stage.INPUT], Stage.INPUT, overrides[Stage.INPUT])
    return tolerances


def _replace(tolerance: Tolerance, stage: str, values: Mapping[str, float]) -> Tolerance:
    try:
        return dataclasses.replace(tolerance, **{k: float(v) for k, v in values.items()})
    except (TypeError, ValueError):
        keys = ", ".join(f.name for f in dataclasses.fields(Tolerance))
        raise SpecError(f"[tolerances.{stage}]: keys are {keys} (numbers); got {dict(values)}") from None
