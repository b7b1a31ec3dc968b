"""Replaying a setting of the reference (the recipe with some culprits changed) against the
deployed tensors, which were read from the server once.

A *setting* is the reference with a sequence of :class:`~harness.diagnose.catalogue.Hypothesis`
applied in order. Each image under a setting gets an :class:`ImageOutcome` (a verdict and an
error per stage); outcomes are cached per setting, and the model's logits per input tensor,
so a setting met again (in a later round, or when ranking causes by cost) costs nothing, and
a change that leaves the model input as it was does not run the model again.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple, Sequence

import numpy as np

from harness.compare.comparators import ARRAYS
from harness.compare.stages import as_8bit
from harness.compare.ties import explained_event
from harness.diagnose.caches import DecodedImages, LogitsCache
from harness.diagnose.catalogue import Hypothesis, resolve_auto
from harness.diagnose.deployed import Deployed
from harness.diagnose.outcomes import Evaluation, ImageOutcome
from harness.outcome import Outcome
from harness.reference import BUILT_IN, Recipe
from harness.reference.model import ReferenceModel
from harness.results import ImageIssue
from harness.scores import LOGITS, ScoreKind
from harness.spec import Preprocess, SpecError, with_overrides
from harness.stage import IMAGE_STAGES, PREPROCESS_STAGES, STAGES, Stage
from harness.task import get_task
from harness.tolerance import Tolerance
from harness.verdict import Verdict

SCREEN_IMAGES = 8
"""Hypotheses are first tried on this many images, those that diverged first
(:meth:`Diagnoser.screening`); one that does not improve on them is dropped without running
the rest (most culprits are wrong, and obviously so)."""
SCREENED = f"the {SCREEN_IMAGES} screening images (those that diverged first)"
"""The screening images, in a status's words."""
DEFAULT_WORKERS = os.cpu_count() or 1
"""Images preprocessed at once: one per core."""

class Setting(NamedTuple):
    """What the reference runs: a recipe with its parameters, the model's precision, and
    whether its image stages are compared in BGR order (the deployment's decoder order kept)."""

    recipe: str
    preprocess: Preprocess
    fp16: bool = False
    bgr_images: bool = False
    postprocess: tuple[tuple[str, object], ...] = ()
    """The reference's ``[postprocess]`` keys changed, (key, value) sorted: the task's result
    step run with them (:meth:`harness.task.Task.diagnose_result`'s ``context``)."""

Prepared = tuple[ImageOutcome, "np.ndarray | None", "tuple[int, int] | None", "np.ndarray | None"]
"""An image's preprocessing outcome, its model input (None: nothing left to run), the size
of its decoded image (what a detector's boxes map back to) and the decoded image itself (what
OCR's words are cut from where the deployment shows none, as check cuts them)."""

class Diagnoser:
    """Replays settings of the reference against one set of deployed tensors.

    ``reference`` and ``deployed_spec`` are taken with their ``auto`` roundings resolved
    (:func:`resolve_auto`); the deployed image stages are turned to uint8 in place where they
    hold whole levels. ``timing`` adds up where the time goes."""

    def __init__(self, deployed: Deployed, recipe: str, reference: Preprocess, deployed_spec: Preprocess,
                 model: ReferenceModel, tolerances: dict[str, Tolerance], fp16_model: Callable[[], ReferenceModel],
                 workers: int = DEFAULT_WORKERS, *, tie_margin: float, scores: ScoreKind = LOGITS, task=None,
                 logits: LogitsCache | None = None):
        self.deployed, self.recipe, self.reference = deployed, recipe, resolve_auto(recipe, reference)
        self.deployed_spec, self.model, self.tolerances = resolve_auto("dali", deployed_spec), model, tolerances
        self.tie_margin = tie_margin
        """A top-1 change is a tie when the reference's margin is at most this (the job's,
        :meth:`harness.session.Session.tie_margin`), in the units of ``scores``."""
        self.scores = scores
        """What the deployed output holds: the reference model's logits are compared as such
        scores (their softmax for probabilities; :mod:`harness.scores`)."""
        self._fp16_model, self._fp16 = fp16_model, None
        self.task = task or get_task(None)
        """What is judged after the model input: classification's top-1 flips, or another task's events."""
        self._gallery = self.task.diagnose_gallery([stages[Stage.OUTPUT] for stages in deployed.stages])
        for stages in deployed.stages:  # whole levels as uint8 once, not as float32 in every comparison
            for stage in IMAGE_STAGES:
                if stage in stages:
                    stages[stage] = as_8bit(stages[stage])
        self.indices = list(range(len(deployed.names)))
        """The images every evaluation runs on: those both sides processed."""
        self.rejected_by_training: list[ImageIssue] = []
        self._outcomes: dict[Setting, dict[int, ImageOutcome]] = {}
        self._logits = logits or LogitsCache()
        """The model's outputs per input (shared with check's read of the deployed side, where given)."""
        self._decode_verdicts: dict[tuple, tuple[str, float]] = {}
        self._decoded = DecodedImages()
        self._executor: ThreadPoolExecutor | None = None
        self.workers = workers
        self.timing: Counter = Counter()
        """Seconds per kind of work, summed over images (parallel work can add up to more than the
        wall time), and ``wall: ...`` seconds of the search's phases."""
        self.counts: Counter = Counter()

    def setting(self, changes: Sequence[Hypothesis]) -> Setting:
        """The reference with ``changes`` applied in order (raises SpecError if it cannot be)."""
        recipe, p, fp16, bgr, post = self.recipe, self.reference, False, False, {}
        for h in changes:
            p = with_overrides(p, **h.overrides)
            recipe, fp16, bgr = h.recipe or recipe, fp16 or h.fp16, bgr or h.bgr_images
            post.update({key: after for key, _, after in h.postprocess})
        return Setting(recipe, p, fp16, bgr, tuple(sorted(post.items())))

    def baseline(self) -> Evaluation:
        """The reference as specified, on every image. Images its recipe cannot process (the
        deployment could) are set aside as rejected by training: no change of parameters
        explains them, and every later evaluation leaves them out."""
        ev = self.evaluate(())
        rejected = {i: o.failed for i, o in ev.outcomes.items() if o.failed}
        self.rejected_by_training = [ImageIssue(self.deployed.names[i], f"reference: {reason}", Outcome.REJECTED_BY_TRAINING)
                                     for i, reason in rejected.items()]
        self.indices = [i for i in self.indices if i not in rejected]
        return ev.subset(self.indices)

    def evaluate(self, applied: Sequence[Hypothesis], h: Hypothesis | None = None,
                 base: Evaluation | None = None) -> Evaluation:
        """``h`` on top of ``applied`` (``h`` None: ``applied`` itself) on every image, against
        ``base`` (what the report compares it with)."""
        made, setting, recipe = self._start(applied, h, base)
        if setting is None:
            return made
        return made.with_outcomes(self._outcomes_of(setting, recipe, self._model(setting.fp16), self.indices))

    def evaluate_recipe(self, recipe: Recipe, name: str) -> Evaluation:
        """Any recipe object (the user's training callable) on every image, as it is: no
        parameter of it can be varied, only compared."""
        setting = Setting(f"custom:{name}", self.reference)
        return Evaluation(name, "-", self._outcomes_of(setting, recipe, self.model, self.indices))

    def screening(self, base: Evaluation, stage: Stage) -> list[int]:
        """The images hypotheses are screened on: at most :data:`SCREEN_IMAGES`, those diverged
        up to ``stage`` under ``base`` first (in order), then the others. The first images alone
        may hold none of those that diverged (2 of 40), and no change can improve an image that
        did not diverge: every hypothesis would be rejected there."""
        last = STAGES.index(stage)
        diverged = [i for i in self.indices if base.outcomes[i].first_divergent_index <= last]
        others = [i for i in self.indices if base.outcomes[i].first_divergent_index > last]
        return (diverged + others)[:SCREEN_IMAGES]

    def screen(self, applied: Sequence[Hypothesis], h: Hypothesis, base: Evaluation, stage: str,
               model: bool) -> Evaluation:
        """``h`` on top of ``applied`` on the :meth:`screening` images, against ``base``
        there: status ``rejected`` when it does no better up to ``stage`` (then its error,
        then the output's), else ``screened``. Without ``model`` the preprocessing runs first:
        with ``stage`` before the model, it rejects what is worse up to ``stage`` and leaves the
        rest (better, or equal up to it) for the model to decide; with ``stage`` after the
        model, it rejects what makes a stage before the model diverge on an image where none
        did (that cannot explain a later stage), and runs the model on the rest."""
        screen = self.screening(base, stage)
        before = base.subset(screen)
        made, setting, recipe = self._start(applied, h, before)
        if setting is None:
            return made
        if model:
            tried = made.with_outcomes(self._outcomes_of(setting, recipe, self._model(setting.fp16), screen))
            return tried.with_status(self._rejected() if tried.score(stage) >= before.score(stage) else "screened")
        prepared = self._prepare(setting, recipe, screen)
        tried = made.with_outcomes({i: outcome for i, (outcome, *_) in prepared.items()})
        if stage in PREPROCESS_STAGES:
            if tried.score(stage)[:2] > before.score(stage)[:2]:
                return tried.with_status(self._rejected("before the model"))
            return tried.with_status("screened")
        if tried.diverged(Stage.INPUT) > before.diverged(Stage.INPUT):
            return tried.with_status(f"rejected: a stage before the model diverges on {SCREENED}, where none did")
        tried = made.with_outcomes(self._finish(setting, self._model(setting.fp16), prepared))
        return tried.with_status(self._rejected() if tried.score(stage) >= before.score(stage) else "screened")

    def _start(self, applied: Sequence[Hypothesis], h: Hypothesis | None,
               base: Evaluation | None) -> tuple[Evaluation, Setting | None, Recipe | None]:
        """An empty evaluation named after ``h``, its setting and its recipe (None: not applicable)."""
        applied = tuple(applied)
        if h is None:
            name, culprit, changes = " + ".join(x.name for x in applied) or "as specified (baseline)", "-", ()
        else:
            name, culprit, changes = h.name, h.culprit, tuple(h.changes(self.reference))
        made = Evaluation(name, culprit, {}, h, applied, "evaluated", changes, base, self.task.name)
        try:
            setting = self.setting((*applied, h) if h else applied)
            recipe = BUILT_IN[setting.recipe](setting.preprocess)  # a library that cannot honour the setting refuses it
            self._model(setting.fp16)
        except SpecError as exc:
            return made.with_status(f"not applicable: {exc}"), None, None
        return made, setting, recipe

    @staticmethod
    def _rejected(when: str = "") -> str:
        return f"rejected: no better on {SCREENED}{' (' + when + ')' if when else ''}"

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
        recipe = self._decoded.serve(recipe, (setting.recipe, setting.preprocess.decode))
        todo = [i for i in indices if i not in cached]
        out = {i: (cached[i], None, None, None) for i in indices if i in cached}
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
            return (failed, None, None, None), (time.perf_counter() - start, 0.0)
        middle = time.perf_counter()
        dep = self.deployed.stages[i]
        verdicts, errors = {}, {}
        for stage in (s for s in PREPROCESS_STAGES if s in ref and s in dep):
            mine = ref[stage][..., ::-1] if setting.bgr_images and stage.is_image else ref[stage]
            if stage == Stage.DECODE:
                # The decoded image depends only on the library and the decode switches: compare it once.
                key = (setting.recipe, setting.preprocess.decode, setting.bgr_images, i)
                if key not in self._decode_verdicts:
                    self._decode_verdicts[key] = self._compare(stage, mine, dep[stage])
                verdicts[stage], errors[stage] = self._decode_verdicts[key]
            else:
                verdicts[stage], errors[stage] = self._compare(stage, mine, dep[stage])
        decoded = ref.get(Stage.DECODE)
        source = tuple(np.asarray(decoded).shape[:2]) if decoded is not None else None
        return ((ImageOutcome(verdicts, errors), ref[Stage.INPUT], source, decoded),
                (middle - start, time.perf_counter() - middle))

    def _compare(self, stage: Stage, reference: np.ndarray, deployed: np.ndarray) -> tuple[str, float]:
        judged = ARRAYS.judge(reference, deployed, self.tolerances[stage])
        v, rmse = judged.verdict, judged.rmse
        return v.value, rmse

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
        todo = [i for i, (_, x, *_) in prepared.items() if x is not None and i not in cached]
        start = time.perf_counter()
        # Batches in parallel, one per core (one intra-op thread each: see the CLI).
        logits, new = self._logits.logits(setting.fp16, model, [prepared[i][1] for i in todo], self._pool().map)
        self.timing["reference model"] += time.perf_counter() - start
        self.counts["reference model (images)"] += new
        self.counts["reference model (cached)"] += len(todo) - new
        for i, out in zip(todo, logits):
            out = self.task.reference_output(out, self.scores)
            outcome, dep_out = prepared[i][0], self.deployed.stages[i][Stage.OUTPUT]
            verdicts, errors = dict(outcome.verdicts), dict(outcome.errors)
            verdicts[Stage.OUTPUT], errors[Stage.OUTPUT] = self._compare(Stage.OUTPUT, out, dep_out)
            # The task's event (a top-1 change; a nearest-neighbour change) within the tie margin
            # is a near tie, not a divergence (issue 14).
            context = {"deployed": self.deployed.stages[i], "source": prepared[i][2], "preprocess": setting.preprocess,
                       "postprocess": dict(setting.postprocess), "decoded": prepared[i][3]}
            event, happened = self.task.diagnose_result(out, dep_out, self._gallery, i, self.tie_margin, context)
            # held to what explains a tie, as check holds its result stage (harness.compare.ties)
            stage = self.task.result_stage
            event = explained_event(stage, event, verdicts[Stage.OUTPUT])
            verdicts[stage], errors[stage] = event.value, happened
            cached[i] = ImageOutcome(verdicts, errors)
        for i, (outcome, *_) in prepared.items():
            cached.setdefault(i, outcome)  # complete already, or the reference failed on it
        return {i: cached[i] for i in prepared}
