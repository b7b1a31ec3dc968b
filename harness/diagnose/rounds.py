"""The search: rounds of hypotheses, each on top of the changes found so far, then every
cause ranked by what it costs in predictions.

Round *n* re-locates the first divergent stage with the changes of rounds 1..n-1 applied to
the reference, tries every culprit of the catalogue on top of them, and keeps the simplest
one that explains that stage (every stage up to it equal or close on every image), or else
the one that improves it most. Only a real improvement counts, explaining included
(:meth:`~harness.diagnose.outcomes.Evaluation.improves`: the stage's error cut by
:data:`~harness.diagnose.outcomes.MIN_ERROR_DROP`, or enough images out of ``diverged``):
what noise does is a candidate at most, never a cause. Rounds stop when nothing diverges,
when nothing in the catalogue helps, or after :data:`MAX_ROUNDS`. A round that only
improved is kept if a later round completes its explanation (two causes at one stage), and
dropped otherwise.

The cost of a cause is what undoing it alone, with every other cause applied, does to the
predictions: the top-1 flips it brings back, then the output error it adds.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from harness.diagnose.advice import recommend
from harness.diagnose.catalogue import Hypothesis, candidate_hypotheses, partnered
from harness.diagnose.conclusion import combined_recommendation, conclude
from harness.diagnose.evaluation import SCREENED, Diagnoser
from harness.diagnose.findings import Cause, CheckVerdict, Diagnosis, Round
from harness.diagnose.outcomes import Evaluation
from harness.spec import Preprocess
from harness.stage import Stage

MAX_ROUNDS = 5
"""Rounds of the search at most (each finds one change, or replaces one found before)."""

Catalogue = Callable[[str, Preprocess, Preprocess], list[Hypothesis]]


def _simplicity(e: Evaluation, stage: Stage) -> tuple:
    # The simplest explanation first: fewest changes (a library swap weighs two), then the smallest error.
    return (len(e.changes) + 2 * bool(e.hypothesis.recipe), e.score(stage))


def search_round(diagnoser: Diagnoser, number: int, applied: tuple[Hypothesis, ...], base: Evaluation,
                 catalogue: Catalogue, progress: Callable[[str], None]) -> Round:
    """Every culprit not yet used, tried on top of ``applied``; the best kept. When none
    explains the stage nor improves it (each half of a setting that goes together may do
    neither alone), the culprits whose settings only make sense together are tried in pairs
    (:func:`~harness.diagnose.catalogue.partnered`) before the round gives up. (A single
    culprit that improves the stage is kept, and the next round tries its partner on top.)"""
    focus = base.first_divergent()
    recipe, reference, *_ = diagnoser.setting(applied)
    # Every culprit, those found already too: another value of one replaces it (two crop-offset
    # roundings can tie on the first images and part on the rest).
    # ... and the task's own culprits after the model (a detector's postprocessing parameters).
    hypotheses = [*catalogue(recipe, reference, diagnoser.deployed_spec),
                  *(Hypothesis(c.name, c.culprit, postprocess=c.changes) for c in diagnoser.task.diagnose_hypotheses())]
    tried, explaining = _try(diagnoser, number, applied, base, focus, hypotheses, progress)
    improving = [e for e in tried if e.evaluated and e.improves(base, focus)]
    if not explaining and not improving:
        pairs = partnered(hypotheses, recipe, reference)
        more, explaining = _try(diagnoser, number, applied, base, focus, pairs, progress, "partners: ")
        tried += more
        improving = [e for e in more if e.evaluated and e.improves(base, focus)]
    if explaining:
        chosen = min(explaining, key=lambda e: _simplicity(e, focus))
    else:
        chosen = min(improving, key=lambda e: e.score(focus), default=None)
    order = ("evaluated", "not pursued", "rejected", "not applicable")
    ranked = tuple(sorted(tried, key=lambda e: (next(k for k, o in enumerate(order) if e.status.startswith(o)),
                                                e.score(focus))))
    return Round(number, base, focus, ranked, chosen, bool(explaining))


def _try(diagnoser: Diagnoser, number: int, applied: tuple[Hypothesis, ...], base: Evaluation, focus: Stage,
         hypotheses: list[Hypothesis], progress: Callable[[str], None],
         label: str = "") -> tuple[list[Evaluation], list[Evaluation]]:
    """``hypotheses`` tried on top of ``applied``: (every one as it ended, those that explain ``focus``).

    Three steps, cheapest first: every hypothesis on the screening images (the diverged first) (preprocessing only,
    when the first divergent stage comes before the model); those that explain the stage
    there, on every image; only when none explains it on every image, the best partial
    explanation: the others with the model on the screening images, then the best of them on
    every image (the next best if it does not improve there)."""
    screened = []
    for k, h in enumerate(hypotheses, 1):
        progress(f"round {number} (first divergent: {focus}): {label}{h.name} ({k}/{len(hypotheses)})")
        screened.append(diagnoser.screen(replacing(applied, h), h, base, focus, model=False))
    live = [e for e in screened if e.status == "screened"]
    before = base.subset(diagnoser.screening(base, focus))
    done = {id(e): diagnoser.evaluate(replacing(applied, e.hypothesis), e.hypothesis, base) for e in live
            if e.diverged(focus) == 0 and e.score(focus)[:2] < before.score(focus)[:2]}
    explaining = [f for f in done.values() if f.diverged(focus) == 0 and f.improves(base, focus)]
    waiting = f"not pursued: another hypothesis explains `{focus}`"
    if not explaining:
        waiting = f"not pursued: a better one on {SCREENED} improves `{focus}` on every image"
        for e in live:
            if id(e) not in done:
                progress(f"round {number}: {label}{e.name}, with the model")
                done[id(e)] = diagnoser.screen(replacing(applied, e.hypothesis), e.hypothesis, base, focus, model=True)
        # Only what improves beyond noise on the screening images is worth every image.
        worth = [e for e in live if done[id(e)].status == "screened" and done[id(e)].improves(before, focus)]
        for e in sorted(worth, key=lambda e: done[id(e)].score(focus)):
            done[id(e)] = diagnoser.evaluate(replacing(applied, e.hypothesis), e.hypothesis, base)
            if done[id(e)].improves(base, focus):
                break
    tried = [done.get(id(e), e) for e in screened]
    return [e.with_status(waiting) if e.status == "screened" else e for e in tried], explaining


def replacing(applied: tuple[Hypothesis, ...], h: Hypothesis) -> tuple[Hypothesis, ...]:
    """The changes found so far without those ``h`` takes the place of: of its culprit, or
    setting a key it sets (a resize filter replaces one of its halves found before)."""
    return tuple(x for x in applied if x.culprit != h.culprit and not x.keys & h.keys)


def diagnose(diagnoser: Diagnoser, deployed_spec_path: str | None, deployed_library: str,
             catalogue: Catalogue = candidate_hypotheses, max_rounds: int = MAX_ROUNDS,
             progress: Callable[[str], None] = lambda s: None,
             verify: "Callable[[list[Hypothesis]], CheckVerdict | None] | None" = None) -> Diagnosis:
    """Rounds until nothing diverges, nothing helps, or ``max_rounds``; then every cause
    kept, ranked by its cost in predictions, and one recommendation covering them all.

    The diagnosis starts from check's verdict where the deployed side was read by check
    (``diagnoser.deployed.check``): where check finds nothing diverged there is nothing to
    search; where it finds a divergence the search does not see, no known culprit explains
    it. ``verify(causes)``: check's comparison of the same images against the reference with
    the causes applied (None: it cannot be said in a spec), which has the last word on what
    remains."""
    start = time.perf_counter()
    baseline = diagnoser.baseline()
    diagnoser.timing["wall: baseline"] += time.perf_counter() - start
    check = diagnoser.deployed.check
    verdict = CheckVerdict.of(check, diagnoser.task.result_stage) if check is not None else None
    rounds: list[Round] = []
    applied: tuple[Hypothesis, ...] = ()
    found_in: dict[str, int] = {}  # culprit -> the round its change (the last value kept) was found in
    base, stopped = baseline, "nothing diverges"
    # check's verdict first: nothing diverged there is nothing to search, whatever the replay says
    searching = verdict is None or verdict.first_divergent is not None
    if searching and verdict is not None and baseline.first_divergent() is None:
        stopped = "the replay sees no divergence"
    while searching and base.first_divergent() is not None:
        if len(rounds) == max_rounds:
            stopped = "round bound"
            break
        start = time.perf_counter()
        r = search_round(diagnoser, len(rounds) + 1, applied, base, catalogue, progress)
        diagnoser.timing[f"wall: round {r.number}"] += time.perf_counter() - start
        rounds.append(r)
        if r.chosen is None:
            stopped = "nothing in the catalogue helps"
            break
        applied, base = (*replacing(applied, r.chosen.hypothesis), r.chosen.hypothesis), r.chosen
        found_in[r.chosen.culprit] = r.number
    # Keep changes up to the last round that explained its stage: a partial improvement
    # nothing completed is a guess, not a cause.
    kept = max((r.number for r in rounds if r.explains), default=0)
    found = sorted(((found_in[h.culprit], h) for h in applied if found_in[h.culprit] <= kept), key=lambda f: f[0])
    start = time.perf_counter()
    final = diagnoser.evaluate([h for _, h in found])
    causes = rank_by_cost(diagnoser, found, final, deployed_spec_path, deployed_library, progress)
    diagnoser.timing["wall: cost of each cause"] += time.perf_counter() - start
    after = None
    if verify is not None and causes and verdict is not None:
        start = time.perf_counter()
        progress("check's comparison with every cause applied")
        after = verify([h for _, h in found])
        diagnoser.timing["wall: check with every cause applied"] += time.perf_counter() - start
    first = verdict.first_divergent if verdict is not None else baseline.first_divergent()
    diagnosis = Diagnosis(baseline, first, tuple(rounds), causes, final, stopped, "", None, verdict, after)
    return dataclasses.replace(diagnosis, conclusion=conclude(baseline, tuple(rounds), causes, final, stopped, verdict,
                                                              after),
                               recommendation=combined_recommendation(causes, diagnosis.remaining))


def rank_by_cost(diagnoser: Diagnoser, found: list[tuple[int, Hypothesis]], final: Evaluation,
                 deployed_spec_path: str | None, deployed_library: str,
                 progress: Callable[[str], None]) -> tuple[Cause, ...]:
    """Each cause undone alone on top of the others: the flips and output error that come
    back are its cost. Most costly first."""
    causes = []
    for number, h in found:
        progress(f"cost of {h.name}")
        without = diagnoser.evaluate([other for _, other in found if other is not h])
        flips = None if without.flips() is None or final.flips() is None else without.flips() - final.flips()
        err_without, err_final = without.error(Stage.OUTPUT), final.error(Stage.OUTPUT)
        output_error = None if err_without is None or err_final is None else err_without - err_final
        causes.append(Cause(h, number, tuple(h.changes(diagnoser.reference)), flips, output_error, without,
                            recommend(h, diagnoser, deployed_spec_path, deployed_library)))
    known = lambda v: (v is not None, v if v is not None else 0)  # noqa: E731
    return tuple(sorted(causes, key=lambda c: (known(c.flips), known(c.output_error)), reverse=True))
