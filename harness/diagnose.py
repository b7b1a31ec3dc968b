"""``harness diagnose``: search the known culprits for the cause of a divergence.

Each hypothesis is the reference recipe with one thing changed (channel order, antialias,
interpolation, resize library, resize dtype, resize mode, size or crop rounding,
normalization scale, JPEG decoding switches, EXIF orientation, model precision). Every
hypothesis is replayed on the same images against the deployed tensors fetched from the
server *once*, and ranked by how much it shrinks the error at the first divergent stage,
then at the output. A hypothesis *explains* the divergence when it brings every stage up
to the first divergent one back to ``equal``/``close`` on every image.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from harness.compare.metrics import quick_verdict, topk_metrics
from harness.compare.result import STAGES
from harness.compare.tolerance import Tolerance
from harness.preprocessing import PREPROCESS_STAGES, ImageError
from harness.reference import BUILT_IN
from harness.reference.model import ReferenceModel
from harness.report.markdown import fmt
from harness.spec import INTERPOLATIONS, Preprocess, SpecError, with_overrides

SCREEN_IMAGES = 8
"""Hypotheses are first tried on this many images; one that does not improve on them is
dropped without running the rest (most culprits are wrong, and obviously so)."""
MODEL_BATCH = 16


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

    def combine(self, other: "Hypothesis") -> "Hypothesis":
        merged = {k: dict(v) for k, v in self.overrides.items()}
        for section, values in other.overrides.items():
            merged.setdefault(section, {}).update(values)
        return Hypothesis(f"{self.name} + {other.name}", f"{self.culprit} + {other.culprit}", merged,
                          other.recipe or self.recipe, self.fp16 or other.fp16)

    def changes(self, base: Preprocess) -> list[tuple[str, Any, Any]]:
        """(section.key, reference value, hypothesized value) of each overridden key."""
        out = []
        for section, values in self.overrides.items():
            for key, value in values.items():
                before = getattr(getattr(base, section), key)
                out.append((f"{section}.{key}", _plain(before), _plain(value)))
        return out


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


NATIVE_ROUNDING = {"torchvision": ("floor", "half_even"), "torch": ("floor", "half_even")}
"""(size, crop offset) rounding of a library's ``auto``; the others round both half up."""


def resolve_auto(recipe: str, p: Preprocess) -> Preprocess:
    """``auto`` roundings spelled out as what the recipe's library does, so that hypotheses
    and advice name real behaviour (torchvision's auto is floor, DALI's is half up)."""
    size, offset = NATIVE_ROUNDING.get(recipe, ("half_up", "half_up"))
    return with_overrides(
        p,
        resize={"size_rounding": size if p.resize.size_rounding == "auto" else p.resize.size_rounding},
        crop={"offset_rounding": offset if p.crop.offset_rounding == "auto" else p.crop.offset_rounding},
    )


def candidate_hypotheses(recipe: str, ref: Preprocess, deployed: Preprocess) -> list[Hypothesis]:
    """Every known culprit, as changes to the reference recipe (``ref``), drawing candidate
    values from common mistakes and from the deployed spec."""
    H = Hypothesis
    hs = [H(f"channel order {_flip(ref.input.channel_order)}", "channel order",
            {"input": {"channel_order": _flip(ref.input.channel_order)}})]
    hs.append(H(f"antialias {'off' if ref.resize.antialias else 'on'}", "resize antialias",
                {"resize": {"antialias": not ref.resize.antialias}}))
    hs += [H(f"interpolation {i}", "resize interpolation", {"resize": {"interpolation": i}})
           for i in INTERPOLATIONS if i != ref.resize.interpolation]
    hs += [H(f"resize with {lib}", "resize library", recipe=lib) for lib in BUILT_IN if lib != recipe]
    hs.append(H(f"resize on {'uint8' if ref.resize.dtype == 'float32' else 'float32'}", "resize dtype",
                {"resize": {"dtype": "uint8" if ref.resize.dtype == "float32" else "float32"}}))
    crop = list(ref.crop.size)
    modes = [("stretch", crop), ("stretch", [ref.resize.size[0]] * 2), ("shorter_side", [256])]
    if deployed.resize != ref.resize:
        modes.append((deployed.resize.mode, list(deployed.resize.size)))
    for mode, size in modes:
        if (mode, tuple(size)) != (ref.resize.mode, ref.resize.size) and (mode != "shorter_side" or len(size) == 1):
            what = f"shorter side {size[0]} + center crop" if mode == "shorter_side" else f"stretch to {size[0]}x{size[-1]}"
            hs.append(H(f"resize mode: {what}", "resize mode", {"resize": {"mode": mode, "size": size}}))
    hs += [H(f"size rounding {r}", "output-size rounding", {"resize": {"size_rounding": r}})
           for r in ("half_up", "floor") if r != ref.resize.size_rounding]
    hs += [H(f"crop offsets rounded {r}", "crop offset rounding", {"crop": {"offset_rounding": r}})
           for r in ("half_up", "half_even") if r != ref.crop.offset_rounding]
    hs += _normalization_hypotheses(ref, deployed)
    d = ref.decode
    hs.append(H(f"fancy upsampling {'off' if d.fancy_upsampling else 'on'}", "JPEG chroma upsampling",
                {"decode": {"fancy_upsampling": not d.fancy_upsampling}}))
    hs.append(H(f"{'accurate' if d.fast_idct else 'fast'} IDCT", "JPEG IDCT", {"decode": {"fast_idct": not d.fast_idct}}))
    hs.append(H(f"EXIF orientation {'ignored' if d.exif_orientation else 'applied'}", "EXIF orientation",
                {"decode": {"exif_orientation": not d.exif_orientation}}))
    hs.append(H("model in fp16", "model precision", fp16=True))
    return _unique(hs, recipe, ref)


def _flip(order: str) -> str:
    return "BGR" if order == "RGB" else "RGB"


def _normalization_hypotheses(ref: Preprocess, deployed: Preprocess) -> list[Hypothesis]:
    n, H = ref.normalize, Hypothesis
    other_range = 1.0 if n.pixel_range == 255.0 else 255.0
    k = other_range / n.pixel_range
    hs = [
        # The same mean/std numbers applied to pixels on the other scale (a missing or extra /255).
        H(f"pixels scaled to 0-{other_range:g} (mean/std numbers unchanged)", "normalization scale",
          {"normalize": {"pixel_range": other_range}}),
        # mean/std written for the other scale (0.485 vs 123.7) with pixels as they are.
        H(f"mean/std on the 0-{other_range:g} scale", "normalization scale",
          {"normalize": {"mean": [m * k for m in n.mean], "std": [s * k for s in n.std]}}),
        H("ImageNet mean/std", "normalization values",
          {"normalize": {"pixel_range": 1.0, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}),
        H("(x - 127.5) / 127.5", "normalization values",
          {"normalize": {"pixel_range": 255.0, "mean": [127.5] * 3, "std": [127.5] * 3}}),
        H("std not applied", "normalization values", {"normalize": {"std": [n.pixel_range / 255.0] * 3}}),
    ]
    if deployed.normalize != n:
        hs.append(H("the deployed spec's normalization", "normalization values",
                    {"normalize": {k2: _plain(v) for k2, v in dataclasses.asdict(deployed.normalize).items()}}))
    return hs


def _unique(hs: list[Hypothesis], recipe: str, ref: Preprocess) -> list[Hypothesis]:
    """Drop hypotheses that change nothing or repeat another's recipe."""
    seen, out = {(recipe, ref, False)}, []
    for h in hs:
        try:
            key = (h.recipe or recipe, with_overrides(ref, **h.overrides), h.fp16)
        except SpecError:
            out.append(h)  # reported as not applicable
            continue
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out


# -- evaluation ----------------------------------------------------------------------------------

@dataclass
class Deployed:
    """The deployed tensors of every image, fetched from the server once."""

    names: list[str]
    data: list[bytes]
    stages: list[dict[str, np.ndarray]]
    failed: list[dict]


@dataclass
class Evaluation:
    """One hypothesis (or the baseline) replayed on the images."""

    name: str
    culprit: str
    images: int = 0
    verdicts: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in STAGES})
    errors: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    first_divergent_index: list[int] = field(default_factory=list)
    """Per image: index in STAGES of its first diverged stage (len(STAGES) if none)."""
    status: str = "evaluated"
    """``evaluated``, ``rejected: ...`` (no better on the first images), ``not applicable: ...``."""
    changes: list = field(default_factory=list)
    hypothesis: Hypothesis | None = None
    baseline: "Evaluation | None" = None
    """The baseline on the same images (the first few, for a rejected hypothesis)."""

    @property
    def evaluated(self) -> bool:
        return self.status.startswith("evaluated")

    def diverged(self, upto: str) -> int:
        """Images with a diverged stage at or before ``upto``."""
        return sum(i <= STAGES.index(upto) for i in self.first_divergent_index)

    def error(self, stage: str) -> float | None:
        """Mean over images of the stage's RMSE (shape mismatches count as infinite)."""
        values = self.errors[stage]
        return float(np.mean(values)) if values else None

    def first_divergent(self) -> str | None:
        first = min(self.first_divergent_index, default=len(STAGES))
        return STAGES[first] if first < len(STAGES) else None

    def top1_agreement(self) -> float | None:
        values = self.errors["topk"]
        return 1.0 - float(np.mean(values)) if values else None

    def score(self, stage: str) -> tuple:
        """Lower is better: images diverged up to ``stage``, error there, output error."""
        err, out = self.error(stage), self.error("output")
        return (self.diverged(stage), math.inf if err is None else err, math.inf if out is None else out)


class Diagnoser:
    """Replays hypotheses against one set of deployed tensors."""

    def __init__(self, deployed: Deployed, recipe: str, reference: Preprocess, deployed_spec: Preprocess,
                 model: ReferenceModel, tolerances: dict[str, Tolerance], fp16_model: Callable[[], ReferenceModel]):
        self.deployed, self.recipe, self.reference = deployed, recipe, resolve_auto(recipe, reference)
        self.deployed_spec, self.model, self.tolerances = resolve_auto("dali", deployed_spec), model, tolerances
        self._fp16_model, self._fp16 = fp16_model, None
        self._baseline_screen: Evaluation | None = None

    def evaluate(self, h: Hypothesis | None, screen_stage: str | None = None) -> Evaluation:
        """Replay ``h`` (None: the reference as specified) on every image; with
        ``screen_stage``, first on a few images, stopping if it does no better there."""
        name, culprit = (h.name, h.culprit) if h else ("as specified (baseline)", "-")
        ev = Evaluation(name, culprit, hypothesis=h, changes=h.changes(self.reference) if h else [])
        try:
            p = with_overrides(self.reference, **h.overrides) if h else self.reference
            recipe = BUILT_IN[(h.recipe if h else None) or self.recipe](p)
            model = self._model(h.fp16 if h else False)
        except SpecError as exc:
            ev.status = f"not applicable: {exc}"
            return ev
        indices = list(range(len(self.deployed.names)))
        if screen_stage and len(indices) > SCREEN_IMAGES:
            if self._baseline_screen is None:
                self._baseline_screen = self._run(BUILT_IN[self.recipe](self.reference), self.model,
                                                  indices[:SCREEN_IMAGES], Evaluation("baseline", "-"))
            ev = self._run(recipe, model, indices[:SCREEN_IMAGES], ev)
            if ev.score(screen_stage) >= self._baseline_screen.score(screen_stage):
                ev.status = f"rejected: no better than the baseline on the first {SCREEN_IMAGES} images"
                ev.baseline = self._baseline_screen
                return ev
            indices = indices[SCREEN_IMAGES:]
        return self._run(recipe, model, indices, ev)

    def _model(self, fp16: bool) -> ReferenceModel:
        if not fp16:
            return self.model
        if self._fp16 is None:
            self._fp16 = self._fp16_model()
        return self._fp16

    def _run(self, recipe, model, indices: list[int], ev: Evaluation) -> Evaluation:
        per_image: dict[int, dict[str, str]] = {}
        inputs, kept = [], []
        for i in indices:
            try:
                ref = recipe(self.deployed.data[i])
            except ImageError as exc:
                per_image[i] = {"decode": "diverged"}
                ev.errors["decode"].append(math.inf)
                ev.status = f"evaluated (the reference fails on {self.deployed.names[i]}: {exc})"
                continue
            dep = self.deployed.stages[i]
            per_image[i] = {stage: self._add(ev, stage, ref[stage], dep[stage])
                            for stage in PREPROCESS_STAGES if stage in ref and stage in dep}
            inputs.append(ref["input"])
            kept.append(i)
        for start in range(0, len(kept), MODEL_BATCH):
            chunk = kept[start:start + MODEL_BATCH]
            for i, out in zip(chunk, model.logits(np.stack(inputs[start:start + MODEL_BATCH]))):
                dep_out = self.deployed.stages[i]["output"]
                per_image[i]["output"] = self._add(ev, "output", out, dep_out)
                agree = topk_metrics(out, dep_out)["top1_agree"]
                per_image[i]["topk"] = "close" if agree else "diverged"
                ev.errors["topk"].append(1.0 - agree)
        for verdicts in per_image.values():
            for stage, v in verdicts.items():
                ev.verdicts[stage][v] += 1
            ev.first_divergent_index.append(next((STAGES.index(s) for s in STAGES if verdicts.get(s) == "diverged"), len(STAGES)))
        ev.images += len(indices)
        return ev

    def _add(self, ev: Evaluation, stage: str, ref: np.ndarray, dep: np.ndarray) -> str:
        v, rmse = quick_verdict(ref, dep, self.tolerances[stage])
        ev.errors[stage].append(rmse)
        return v.value


@dataclass
class Diagnosis:
    baseline: Evaluation
    first_divergent: str | None
    ranked: list[Evaluation]
    conclusion: str
    recommendation: str | None
    explained_by: Evaluation | None


def diagnose(diagnoser: Diagnoser, hypotheses: Iterable[Hypothesis], deployed_spec_path: str, deployed_library: str,
             progress: Callable[[str], None] = lambda s: None) -> Diagnosis:
    """Evaluate the baseline and every hypothesis, combine the best with the others when no
    single one explains the divergence, rank them, and conclude."""
    baseline = diagnoser.evaluate(None)
    focus = baseline.first_divergent()
    stage = focus or "output"  # nothing diverged: rank by the residual output error
    hypotheses = list(hypotheses)
    evaluations = []
    for h in hypotheses:
        progress(h.name)
        evaluations.append(diagnoser.evaluate(h, screen_stage=stage))

    def improving():
        return [e for e in evaluations if e.evaluated and e.score(stage) < baseline.score(stage)]

    def explaining():
        return [e for e in improving() if focus and e.diverged(focus) == 0]

    if focus and not explaining() and len(improving()) >= 2:
        # No single culprit: try the best one together with each other one that helped.
        best, *others = sorted(improving(), key=lambda e: e.score(stage))
        for other in others:
            combined = best.hypothesis.combine(other.hypothesis)
            progress(combined.name)
            evaluations.append(diagnoser.evaluate(combined, screen_stage=stage))
    for e in evaluations:
        e.baseline = e.baseline or baseline
    ranked = sorted(evaluations, key=lambda e: (not e.evaluated, e.score(stage)))
    if focus is None:
        return Diagnosis(baseline, None, ranked, "No stage diverged: every stage is equal or close to the reference, "
                         "so there is no divergence to explain and no dominant cause.", None, None)
    if explaining():
        # The simplest explanation first: fewest changes (a library swap weighs two), then the smallest error.
        best = min(explaining(), key=lambda e: (len(e.changes) + 2 * bool(e.hypothesis.recipe), e.score(stage)))
        conclusion = (f"The divergence first appears at `{focus}`; **{best.name}** ({best.culprit}) explains it: "
                      f"with it, every stage up to `{focus}` is equal or close on all {best.images} images "
                      f"(error at `{focus}` {fmt(baseline.error(focus))} -> {fmt(best.error(focus))}; output "
                      f"{fmt(baseline.error('output'))} -> {fmt(best.error('output'))}).")
        if best.first_divergent():
            conclusion += (f" What remains diverges first at `{best.first_divergent()}`: run diagnose again with this "
                           "change applied to the spec's [reference] to explain it.")
        return Diagnosis(baseline, focus, ranked, conclusion,
                         recommend(best.hypothesis, diagnoser, deployed_spec_path, deployed_library), best)
    if improving():
        best = min(improving(), key=lambda e: e.score(stage))
        conclusion = (f"The divergence first appears at `{focus}`. No known culprit fully explains it; **{best.name}** "
                      f"({best.culprit}) explains part of it (error at `{focus}` {fmt(baseline.error(focus))} -> "
                      f"{fmt(best.error(focus))}, images diverged there {baseline.diverged(focus)} -> "
                      f"{best.diverged(focus)}). The isolated errors of `harness check` show which stage adds the rest.")
        return Diagnosis(baseline, focus, ranked, conclusion, None, None)
    return Diagnosis(baseline, focus, ranked,
                     f"The divergence first appears at `{focus}`, and none of the {len(hypotheses)} known culprits "
                     f"reduces it: nothing here explains it. Compare that stage's saved tensors "
                     f"(`harness check --save-tensors`) by hand.", None, None)


def recommend(h: Hypothesis, diagnoser: Diagnoser, deployed_spec_path: str, deployed_library: str) -> str:
    """The change to make, in spec terms, on the side that should change: the deployment
    when it can take training's values, else training."""
    if h.fp16:
        return ("The deployed classifier answers like the model in fp16: build the TensorRT engine in fp32 "
                "(FP16=0 for the engine builder), or validate the model in fp16 before serving it so.")
    parts = []
    if h.recipe:
        parts.append(f"The deployment computes like {h.recipe}, not like training's {diagnoser.recipe}, with the same "
                     f"settings: preprocess the training data with {h.recipe} ([reference] recipe = \"{h.recipe}\"), "
                     f"since the deployed {deployed_library} cannot change its arithmetic.")
    changes = h.changes(diagnoser.reference)
    if not changes:
        return " ".join(parts)
    deployed = diagnoser.deployed_spec
    where = f"in the deployed spec ({deployed_spec_path}, read by the {deployed_library} pipeline)"
    if all(_plain(_get(deployed, key)) == trained for key, trained, _ in changes):
        return " ".join(parts + [
            f"The deployed spec already says {_assign(changes, 1)}, yet the server behaves as if {_assign(changes, 2)}: "
            f"it is not serving {deployed_spec_path}; rebuild and redeploy the repository."])
    # All of training's values at once (a resize mode comes with its size), else key by key.
    groups = [changes] if _deployable(deployed, changes, deployed_library) is None else [[c] for c in changes]
    for group in groups:
        reason = _deployable(deployed, group, deployed_library)
        if reason is None:
            parts.append(f"Set {_assign(group, 1)} {where} to match training (the deployment behaves as if "
                         f"{_assign(group, 2)}); or train with {_assign(group, 2)}.")
        else:
            parts.append(f"Train with {_assign(group, 2)}: the deployed {deployed_library} cannot do "
                         f"{_assign(group, 1)} ({reason}).")
    return " ".join(parts)


def _get(p: Preprocess, key: str):
    section, name = key.split(".")
    return getattr(getattr(p, section), name)


def _assign(changes, which: int) -> str:
    return ", ".join(f"{c[0]} = {_toml(c[which])}" for c in changes)


def _deployable(deployed: Preprocess, changes, library: str) -> str | None:
    """None if the deployed implementation can take these values, else why not."""
    overrides: dict[str, dict] = {}
    for key, trained, _ in changes:
        section, name = key.split(".")
        overrides.setdefault(section, {})[name] = trained
    try:
        _check_deployable(with_overrides(deployed, **overrides), library)
    except SpecError as exc:
        return str(exc).removeprefix("override: ")
    return None


def _check_deployable(p: Preprocess, library: str) -> None:
    if library == "DALI":
        from harness.preprocessing.dali_graph import check_supported
    else:
        from harness.preprocessing.opencv import check_supported
    check_supported(p)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)
