"""Replaying a setting of the reference (the recipe with some culprits changed) against the
deployed tensors, which were read from the server once.

A *setting* is the reference with a sequence of :class:`~harness.diagnose.catalogue.Hypothesis`
applied in order. Each image under a setting gets an :class:`ImageOutcome` (a verdict and an
error per stage); outcomes are cached per setting, and the model's logits per input tensor,
so a setting met again (in a later round, or when ranking causes by cost) costs nothing, and
a change that leaves the model input as it was does not run the model again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from harness.compare.metrics import quick_verdict
from harness.compare.stages import as_8bit
from harness.compare.ties import default_tie_margin, flip_verdict
from harness.compare.tolerance import Tolerance, Verdict
from harness.diagnose.catalogue import Hypothesis, resolve_auto
from harness.reference import BUILT_IN, Recipe
from harness.reference.model import ReferenceModel
from harness.spec import Preprocess, SpecError, with_overrides
from harness.stage import IMAGE_STAGES, PREPROCESS_STAGES, STAGES, Stage

SCREEN_IMAGES = 8
"""Hypotheses are first tried on this many images; one that does not improve on them is
dropped without running the rest (most culprits are wrong, and obviously so)."""
MODEL_BATCH = 8
DEFAULT_WORKERS = os.cpu_count() or 1
"""Images preprocessed at once: one per core."""
DECODED_SETTINGS = 2
"""Decoded images are kept for this many (library, decode switches) settings at most."""

Setting = tuple[str, Preprocess, bool]
"""(recipe name, preprocessing parameters, model in fp16): what the reference runs."""


@dataclass
class Deployed:
    """The deployed tensors of every image, fetched from the server once."""

    names: list[str]
    data: list[bytes]
    stages: list[dict[str, np.ndarray]]
    failed: list[dict]
    """``{"image", "reason", "outcome"}`` of images the deployment did not answer."""


@dataclass(frozen=True)
class ImageOutcome:
    """One image under one setting: each stage's verdict and error (RMSE; ``topk``: 1.0 when
    the top-1 class changed, else 0.0), or why the reference failed on it."""

    verdicts: Mapping[str, str]
    errors: Mapping[str, float]
    failed: str | None = None

    @property
    def first_divergent_index(self) -> int:
        """Index in STAGES of the first diverged stage (len(STAGES) if none)."""
        return next((i for i, s in enumerate(STAGES) if self.verdicts.get(s) == Verdict.DIVERGED), len(STAGES))


Prepared = tuple[ImageOutcome, "np.ndarray | None"]
"""An image's preprocessing outcome and its model input (None: nothing left to run)."""


@dataclass(frozen=True)
class Evaluation:
    """One setting replayed on some images: a hypothesis tried on top of the changes found
    so far (``on_top_of``), or a setting evaluated for itself (``hypothesis`` None)."""

    name: str
    culprit: str
    outcomes: Mapping[int, ImageOutcome] = field(default_factory=dict)
    hypothesis: Hypothesis | None = None
    on_top_of: tuple[Hypothesis, ...] = ()
    status: str = "evaluated"
    """``evaluated`` (every image), ``screened`` (the first few, better there), ``rejected: ...``
    (no better there), ``not pursued: ...`` (another hypothesis explains the stage), or
    ``not applicable: ...``."""
    changes: tuple = ()
    """(key, reference value, hypothesized value) of the hypothesis, against the original reference."""
    baseline: "Evaluation | None" = None
    """What it was compared with, on the same images (the first few, for a rejected hypothesis)."""

    @property
    def evaluated(self) -> bool:
        return self.status.startswith("evaluated")

    @property
    def images(self) -> int:
        return len(self.outcomes)

    @property
    def verdicts(self) -> dict[str, Counter]:
        counts = {s: Counter() for s in STAGES}
        for o in self.outcomes.values():
            for stage, v in o.verdicts.items():
                counts[stage][v] += 1
        return counts

    def errors(self, stage: Stage) -> list[float]:
        return [o.errors[stage] for o in self.outcomes.values() if stage in o.errors]

    def diverged(self, upto: Stage) -> int:
        """Images with a diverged stage at or before ``upto``."""
        last = STAGES.index(upto)
        return sum(o.first_divergent_index <= last for o in self.outcomes.values())

    def error(self, stage: Stage) -> float | None:
        """Mean over images of the stage's RMSE (shape mismatches count as infinite)."""
        values = self.errors(stage)
        return float(np.mean(values)) if values else None

    def first_divergent(self) -> Stage | None:
        first = min((o.first_divergent_index for o in self.outcomes.values()), default=len(STAGES))
        return STAGES[first] if first < len(STAGES) else None

    def flips(self) -> int | None:
        """Images whose top-1 class differs from the deployment's (near ties included)."""
        values = self.errors(Stage.TOPK)
        return int(sum(values)) if values else None

    def ties(self) -> int:
        """Top-1 changes within the tie margin: counted in :meth:`flips`, never divergences."""
        return sum(o.verdicts.get(Stage.TOPK) == Verdict.TIE for o in self.outcomes.values())

    def top1_agreement(self) -> float | None:
        values = self.errors(Stage.TOPK)
        return 1.0 - float(np.mean(values)) if values else None

    def score(self, stage: Stage) -> tuple:
        """Lower is better: images diverged up to ``stage``, error there, output error."""
        err, out = self.error(stage), self.error(Stage.OUTPUT)
        return (self.diverged(stage), math.inf if err is None else err, math.inf if out is None else out)

    def subset(self, indices: Sequence[int]) -> "Evaluation":
        """The same evaluation restricted to some images."""
        return Evaluation(self.name, self.culprit, {i: self.outcomes[i] for i in indices if i in self.outcomes},
                          self.hypothesis, self.on_top_of, self.status, self.changes)

    def with_outcomes(self, outcomes: Mapping[int, ImageOutcome]) -> "Evaluation":
        return dataclasses.replace(self, outcomes=outcomes)

    def with_status(self, status: str) -> "Evaluation":
        return dataclasses.replace(self, status=status)


class Diagnoser:
    """Replays settings of the reference against one set of deployed tensors.

    ``reference`` and ``deployed_spec`` are taken with their ``auto`` roundings resolved
    (:func:`resolve_auto`); the deployed image stages are turned to uint8 in place where they
    hold whole levels. ``timing`` adds up where the time goes."""

    def __init__(self, deployed: Deployed, recipe: str, reference: Preprocess, deployed_spec: Preprocess,
                 model: ReferenceModel, tolerances: dict[str, Tolerance], fp16_model: Callable[[], ReferenceModel],
                 workers: int = DEFAULT_WORKERS, tie_margin: float | None = None):
        self.deployed, self.recipe, self.reference = deployed, recipe, resolve_auto(recipe, reference)
        self.deployed_spec, self.model, self.tolerances = resolve_auto("dali", deployed_spec), model, tolerances
        self.tie_margin = default_tie_margin(tolerances) if tie_margin is None else tie_margin
        """A top-1 change is a tie when the reference's margin is at most this (default: the output's atol)."""
        self._fp16_model, self._fp16 = fp16_model, None
        for stages in deployed.stages:  # whole levels as uint8 once, not as float32 in every comparison
            for stage in IMAGE_STAGES:
                if stage in stages:
                    stages[stage] = as_8bit(stages[stage])
        self.indices = list(range(len(deployed.names)))
        """The images every evaluation runs on: those both sides processed."""
        self.rejected_by_training: list[dict] = []
        self._outcomes: dict[Setting, dict[int, ImageOutcome]] = {}
        self._logits: dict[tuple[bool, bytes], np.ndarray] = {}
        self._decode_verdicts: dict[tuple, tuple[str, float]] = {}
        self._decoded: dict[tuple, dict[int, object]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self.workers = workers
        self.timing: Counter = Counter()
        """Seconds per kind of work, summed over images (parallel work can add up to more than the
        wall time), and ``wall: ...`` seconds of the search's phases."""
        self.counts: Counter = Counter()

    def setting(self, changes: Sequence[Hypothesis]) -> Setting:
        """The reference with ``changes`` applied in order (raises SpecError if it cannot be)."""
        recipe, p, fp16 = self.recipe, self.reference, False
        for h in changes:
            p = with_overrides(p, **h.overrides)
            recipe, fp16 = h.recipe or recipe, fp16 or h.fp16
        return recipe, p, fp16

    def baseline(self) -> Evaluation:
        """The reference as specified, on every image. Images its recipe cannot process (the
        deployment could) are set aside as rejected by training: no change of parameters
        explains them, and every later evaluation leaves them out."""
        ev = self.evaluate(())
        rejected = {i: o.failed for i, o in ev.outcomes.items() if o.failed}
        self.rejected_by_training = [{"image": self.deployed.names[i], "reason": f"reference: {reason}",
                                      "outcome": "rejected by training"} for i, reason in rejected.items()]
        self.indices = [i for i in self.indices if i not in rejected]
        return ev.subset(self.indices)

    def evaluate(self, applied: Sequence[Hypothesis], h: Hypothesis | None = None,
                 base: Evaluation | None = None) -> Evaluation:
        """``h`` on top of ``applied`` (``h`` None: ``applied`` itself) on every image, against
        ``base`` (what the report compares it with)."""
        made, setting, recipe = self._start(applied, h, base)
        if setting is None:
            return made
        return made.with_outcomes(self._outcomes_of(setting, recipe, self._model(setting[2]), self.indices))

    def screen(self, applied: Sequence[Hypothesis], h: Hypothesis, base: Evaluation, stage: str,
               model: bool) -> Evaluation:
        """``h`` on top of ``applied`` on the first :data:`SCREEN_IMAGES` images, against ``base``
        there: status ``rejected`` when it does no better up to ``stage`` (then its error,
        then the output's), else ``screened``. Without ``model``, and ``stage`` before the
        model, only the preprocessing runs: it rejects what is worse up to ``stage`` and leaves
        the rest (better, or equal up to it) for the model to decide."""
        screen = self.indices[:SCREEN_IMAGES]
        before = base.subset(screen)
        made, setting, recipe = self._start(applied, h, before)
        if setting is None:
            return made
        if not model and stage in PREPROCESS_STAGES:
            prepared = self._prepare(setting, recipe, screen)
            tried = made.with_outcomes({i: outcome for i, (outcome, _) in prepared.items()})
            if tried.score(stage)[:2] > before.score(stage)[:2]:
                return tried.with_status(self._rejected("before the model"))
            return tried.with_status("screened")
        tried = made.with_outcomes(self._outcomes_of(setting, recipe, self._model(setting[2]), screen))
        return tried.with_status(self._rejected() if tried.score(stage) >= before.score(stage) else "screened")

    def _start(self, applied: Sequence[Hypothesis], h: Hypothesis | None,
               base: Evaluation | None) -> tuple[Evaluation, Setting | None, Recipe | None]:
        """An empty evaluation named after ``h``, its setting and its recipe (None: not applicable)."""
        applied = tuple(applied)
        if h is None:
            name, culprit, changes = " + ".join(x.name for x in applied) or "as specified (baseline)", "-", ()
        else:
            name, culprit, changes = h.name, h.culprit, tuple(h.changes(self.reference))
        made = Evaluation(name, culprit, {}, h, applied, "evaluated", changes, base)
        try:
            setting = self.setting((*applied, h) if h else applied)
            recipe = BUILT_IN[setting[0]](setting[1])  # a library that cannot honour the setting refuses it
            self._model(setting[2])
        except SpecError as exc:
            return made.with_status(f"not applicable: {exc}"), None, None
        return made, setting, recipe

    @staticmethod
    def _rejected(when: str = "") -> str:
        return f"rejected: no better on the first {SCREEN_IMAGES} images{' (' + when + ')' if when else ''}"

    def _model(self, fp16: bool) -> ReferenceModel:
        if not fp16:
            return self.model
        if self._fp16 is None:
            self._fp16 = self._fp16_model()
        return self._fp16

    def _outcomes_of(self, setting: Setting, recipe, model, indices: Sequence[int]) -> dict[int, ImageOutcome]:
        cached = self._outcomes.setdefault(setting, {})
        missing = [i for i in indices if i not in cached]
        if missing:
            cached.update(self._finish(setting, model, self._prepare(setting, recipe, missing)))
        return {i: cached[i] for i in indices}

    def _prepare(self, setting: Setting, recipe, indices: Sequence[int]) -> dict[int, Prepared]:
        """Per image: the outcome of its preprocessing stages and its model input (None when
        the outcome is already complete, or the reference failed), images in parallel (the
        libraries release the GIL; one thread per core)."""
        cached = self._outcomes.get(setting, {})
        recipe = self._with_cached_decode(recipe, setting)
        todo = [i for i in indices if i not in cached]
        out = {i: (cached[i], None) for i in indices if i in cached}
        for i, (prepared, seconds) in zip(todo, self._pool().map(lambda i: self._prepare_one(setting, recipe, i), todo)):
            out[i] = prepared
            self.timing["reference preprocessing"] += seconds[0]
            self.timing["comparison"] += seconds[1]
        self.counts["reference preprocessing (images)"] += len(todo)
        return {i: out[i] for i in indices}

    def _prepare_one(self, setting: Setting, recipe, i: int) -> tuple[Prepared, tuple[float, float]]:
        """One image's preprocessing outcome and model input, and the seconds (recipe, comparisons)."""
        start = time.perf_counter()
        try:
            ref = recipe(self.deployed.data[i])
        except Exception as exc:  # noqa: BLE001 - any failure of the reference on one image is that image's
            text = str(exc).strip()
            reason = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
            failed = ImageOutcome({Stage.DECODE: Verdict.DIVERGED.value}, {Stage.DECODE: math.inf}, reason)
            return (failed, None), (time.perf_counter() - start, 0.0)
        middle = time.perf_counter()
        dep = self.deployed.stages[i]
        verdicts, errors = {}, {}
        for stage in (s for s in PREPROCESS_STAGES if s in ref and s in dep):
            if stage == Stage.DECODE:
                # The decoded image depends only on the library and the decode switches: compare it once.
                key = (setting[0], setting[1].decode, i)
                if key not in self._decode_verdicts:
                    self._decode_verdicts[key] = self._compare(stage, ref[stage], dep[stage])
                verdicts[stage], errors[stage] = self._decode_verdicts[key]
            else:
                verdicts[stage], errors[stage] = self._compare(stage, ref[stage], dep[stage])
        return (ImageOutcome(verdicts, errors), ref[Stage.INPUT]), (middle - start, time.perf_counter() - middle)

    def _compare(self, stage: Stage, reference: np.ndarray, deployed: np.ndarray) -> tuple[str, float]:
        v, rmse = quick_verdict(reference, deployed, self.tolerances[stage])
        return v.value, rmse

    def _with_cached_decode(self, recipe, setting: Setting):
        """The recipe with its decode step served from a cache shared by every setting that
        decodes alike (same library, same switches): most hypotheses change a later stage.
        The recipe's own ``__call__`` runs unchanged; recipes that do not decode through the
        ``decode`` hook (DALI runs its whole graph at once) are left as they are."""
        if type(recipe).__call__ is not Recipe.__call__ or "decode" in vars(recipe):  # or served already
            return recipe
        key = (setting[0], setting[1].decode)
        store = self._decoded.pop(key, {})
        self._decoded[key] = store  # most recently used last
        while len(self._decoded) > DECODED_SETTINGS:
            self._decoded.pop(next(iter(self._decoded)))
        decode = recipe.decode

        def cached(data: bytes):
            if id(data) not in store:  # the deployed bytes objects live as long as the diagnoser
                store[id(data)] = decode(data)
            return store[id(data)]

        recipe.decode = cached
        return recipe

    def close(self) -> None:
        """Stop the worker threads and drop the decoded images (the diagnoser stays usable)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
        self._decoded.clear()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.workers)
        return self._executor

    def _finish(self, setting: Setting, model, prepared: dict[int, Prepared]) -> dict[int, ImageOutcome]:
        """The model's output and top-1 class added to prepared images; cached per setting."""
        cached = self._outcomes.setdefault(setting, {})
        todo = [i for i, (_, x) in prepared.items() if x is not None and i not in cached]
        logits = self._logits_of(setting[2], model, [prepared[i][1] for i in todo])
        for i, out in zip(todo, logits):
            outcome, dep_out = prepared[i][0], self.deployed.stages[i][Stage.OUTPUT]
            verdicts, errors = dict(outcome.verdicts), dict(outcome.errors)
            verdicts[Stage.OUTPUT], errors[Stage.OUTPUT] = self._compare(Stage.OUTPUT, out, dep_out)
            # A top-1 change within the tie margin is a near tie, not a divergence (issue 14).
            flip = flip_verdict(out, int(np.argmax(dep_out)), self.tie_margin)
            verdicts[Stage.TOPK] = Verdict.CLOSE.value if flip is None else flip.value
            errors[Stage.TOPK] = float(flip is not None)
            cached[i] = ImageOutcome(verdicts, errors)
        for i, (outcome, _) in prepared.items():
            cached.setdefault(i, outcome)  # complete already, or the reference failed on it
        return {i: cached[i] for i in prepared}

    def _logits_of(self, fp16: bool, model: ReferenceModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The model's logits per input, run only on inputs not seen before (in batches)."""
        keys = [(fp16, hashlib.blake2b(x.tobytes(), digest_size=16).digest()) for x in inputs]
        new = list({k: x for k, x in zip(keys, inputs) if k not in self._logits}.items())
        start = time.perf_counter()
        chunks = [new[s:s + MODEL_BATCH] for s in range(0, len(new), MODEL_BATCH)]
        # Batches in parallel, one per core (one intra-op thread each: see the CLI).
        for chunk, outs in zip(chunks, self._pool().map(lambda c: model.logits(np.stack([x for _, x in c])), chunks)):
            for (k, _), out in zip(chunk, outs):
                self._logits[k] = out
        self.timing["reference model"] += time.perf_counter() - start
        self.counts["reference model (images)"] += len(new)
        self.counts["reference model (cached)"] += len(inputs) - len(new)
        return [self._logits[k] for k in keys]
