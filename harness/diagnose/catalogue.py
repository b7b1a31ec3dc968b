"""The catalogue of known culprits, each as a change to the reference recipe.

A :class:`Hypothesis` is the reference recipe with one thing changed: channel order,
the resize filter (each half, or both), resize library, resize dtype, resize mode, size or crop rounding,
normalization scale or values, JPEG decoding switches, EXIF orientation, model precision.
:func:`candidate_hypotheses` lists them relative to any reference, so that a later round of
the search can draw them again on top of the changes found so far.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness import operations
from harness.operations import crop
from harness.reference import BUILT_IN
from harness.spec import Preprocess, SpecError, with_overrides


@dataclass(frozen=True)
class Hypothesis:
    """The reference recipe with one culprit changed."""

    name: str
    culprit: str
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    recipe: str | None = None
    """Another library doing the same preprocessing (None: the reference's own)."""
    fp16: bool = False
    """Run the reference model in half precision (TensorRT builds with --fp16)."""
    bgr_images: bool = False
    """Compare the image stages in BGR order: the deployment keeps its decoder's (OpenCV's) order."""
    postprocess: tuple[tuple[str, Any, Any], ...] = ()
    """(key, reference value, hypothesized value) of the reference's ``[postprocess]`` table
    changed: a task's result step (a detector's thresholds, unclip ratio, NMS), offered by the
    task (:meth:`harness.task.Task.diagnose_hypotheses`) and judged by its result stage. A key
    ``table.key`` names another table of the task's (OCR's ``recognition.crop``)."""

    def changes(self, base: Preprocess) -> list[tuple[str, Any, Any]]:
        """(section.key, reference value, hypothesized value) of each key it sets to another value."""
        out = []
        for section, values in self.overrides.items():
            for key, value in values.items():
                before = getattr(getattr(base, section), key)
                if plain(before) != plain(value):
                    out.append((f"{section}.{key}", plain(before), plain(value)))
        return out + [(result_key(key), plain(before), plain(after)) for key, before, after in self.postprocess]

    @property
    def keys(self) -> frozenset[str]:
        """Every spec key it sets (what a later hypothesis setting one of them replaces)."""
        return frozenset([*(f"{s}.{k}" for s, values in self.overrides.items() for k in values),
                          *(result_key(k) for k, _, _ in self.postprocess), *(["recipe"] if self.recipe else [])])


def result_key(key: str) -> str:
    """A result culprit's key as the spec names it: ``postprocess.KEY``, or ``TABLE.KEY`` as given."""
    return key if "." in key else f"postprocess.{key}"


def plain(value):
    """Tuples as lists, as TOML and JSON write them."""
    return list(value) if isinstance(value, tuple) else value


def resolve_auto(recipe: str, p: Preprocess) -> Preprocess:
    """``auto`` roundings spelled out as what the recipe's library does (its
    ``native_rounding``), so that hypotheses and advice name real behaviour (torchvision's
    auto is floor, DALI's is half up)."""
    library = BUILT_IN.get(recipe)
    size, offset = library.native_rounding if library else ("half_up", "half_up")
    return with_overrides(
        p,
        resize={"size_rounding": size if p.resize.size_rounding == "auto" else p.resize.size_rounding},
        **crop.spelled_out(p, offset),
    )


def candidate_hypotheses(recipe: str, ref: Preprocess, deployed: Preprocess) -> list[Hypothesis]:
    """Every known culprit, as changes to the reference recipe (``ref``), drawing candidate
    values from common mistakes and from the deployed spec."""
    H = Hypothesis
    hs = of_operations(recipe, ref, deployed, "channel order", "resize filter")
    hs += [H(f"resize with {lib}", "resize library", recipe=lib) for lib in BUILT_IN if lib != recipe]
    hs.append(H(f"resize on {'uint8' if ref.resize.dtype == 'float32' else 'float32'}", "resize dtype",
                {"resize": {"dtype": "uint8" if ref.resize.dtype == "float32" else "float32"}}))
    hs += of_operations(recipe, ref, deployed, "resize mode", "crop")
    return _unique(hs + _common_hypotheses(recipe, ref, deployed), recipe, ref)


def partnered(hypotheses: list[Hypothesis], recipe: str, ref: Preprocess) -> list[Hypothesis]:
    """Every pair of ``hypotheses`` whose culprits the operations declare partners
    (:func:`harness.operations.partners`: settings that only make sense together), each as one
    hypothesis on ``ref`` under ``recipe``; those a library cannot make, and those that repeat a
    setting ``hypotheses`` hold already (a resize filter), left out. When no hypothesis of a
    round explains its stage or improves it beyond noise, the search tries these before it gives
    up, so that a half that improves the stage too little to count (or that no library can do
    alone) is not dropped without its partner."""
    seen = {(recipe, ref, False, False, ())}
    for h in hypotheses:
        with contextlib.suppress(SpecError):
            seen.add(setting_key(h, recipe, ref))
    out = []
    for first, second in operations.partners():
        for a in (h for h in hypotheses if h.culprit == first):
            for pair in (combined(a, b) for b in hypotheses if b.culprit == second):
                try:
                    key = setting_key(pair, recipe, ref)
                except SpecError:
                    continue  # a pair no library can make is no hypothesis
                if key not in seen:
                    seen.add(key)
                    out.append(pair)
    return out


def combined(a: Hypothesis, b: Hypothesis) -> Hypothesis:
    """``a`` and ``b`` as one hypothesis (``b``'s values over ``a``'s where both set a key)."""
    overrides = {section: dict(values) for section, values in a.overrides.items()}
    for section, values in b.overrides.items():
        overrides.setdefault(section, {}).update(values)
    return Hypothesis(f"{a.name} + {b.name}", f"{a.culprit} + {b.culprit}", overrides, b.recipe or a.recipe,
                      a.fp16 or b.fp16, a.bgr_images or b.bgr_images, (*a.postprocess, *b.postprocess))


def setting_key(h: Hypothesis, recipe: str, ref: Preprocess) -> tuple:
    """What ``h`` makes of ``ref`` under ``recipe``: two hypotheses with one key are the same
    setting (raises :class:`SpecError` where it cannot be made)."""
    return h.recipe or recipe, with_overrides(ref, **h.overrides), h.fp16, h.bgr_images, h.postprocess


def _common_hypotheses(recipe: str, ref: Preprocess, deployed: Preprocess) -> list[Hypothesis]:
    """Culprits of every model's preprocessing: normalization, JPEG decoding, EXIF, precision."""
    H = Hypothesis
    hs = of_operations(recipe, ref, deployed, "normalization", "decode")
    hs.append(H("model in fp16", "model precision", fp16=True))
    return hs


def of_operations(recipe: str, ref: Preprocess, deployed: Preprocess, *names: str) -> list[Hypothesis]:
    """The named operations' alternatives (:mod:`harness.operations`) as hypotheses."""
    return [Hypothesis(a.name, a.culprit, a.overrides, recipe=a.recipe, bgr_images=a.bgr_images)
            for a in operations.alternatives(recipe, ref, deployed, *names)]


def _unique(hs: list[Hypothesis], recipe: str, ref: Preprocess) -> list[Hypothesis]:
    """Drop hypotheses that change nothing or repeat another's recipe."""
    seen, out = {(recipe, ref, False, False, ())}, []
    for h in hs:
        try:
            key = setting_key(h, recipe, ref)
        except SpecError:
            out.append(h)  # reported as not applicable
            continue
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out
