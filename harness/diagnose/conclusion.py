"""The diagnosis in words: what each round found, what each cause costs, what remains, and
one recommendation covering every cause."""

from __future__ import annotations

from harness.diagnose.findings import Cause, CheckVerdict, Round
from harness.diagnose.outcomes import MIN_ERROR_DROP, MIN_IMAGES_ERROR_DROP, MIN_IMAGES_LEFT, Evaluation
from harness.formatting import fmt
from harness.stage import Stage


def _explained(e: Evaluation, base: Evaluation, focus: Stage) -> str:
    return (f"with it, every stage up to `{focus}` is equal or close on all {e.images} images "
            f"(error at `{focus}` {fmt(base.error(focus))} -> {fmt(e.error(focus))}; output "
            f"{fmt(base.error(Stage.OUTPUT))} -> {fmt(e.error(Stage.OUTPUT))})")


def conclude(baseline: Evaluation, rounds: tuple[Round, ...], causes: tuple[Cause, ...], final: Evaluation,
             stopped: str, check: CheckVerdict | None = None, after: CheckVerdict | None = None) -> str:
    """What was found, round by round, and what remains. ``check``: check's verdict on the same
    images, where the diagnosis starts from; ``after``: check's comparison with every cause
    applied."""
    focus = check.first_divergent if check is not None else baseline.first_divergent()
    if focus is None:
        ties = check.summary.ties if check is not None else baseline.ties()
        tied = f" {_count(ties, *baseline.task.tie_words)}, not a divergence." if ties else ""
        return ("No stage diverged: every stage is equal or close to the reference, so there is no divergence to "
                "explain and no dominant cause." + tied)
    if not rounds and check is not None:  # check's divergence, which the replay does not show
        return (f"`harness check` finds the divergence first at `{focus}` ({check.describe()}), but the reference "
                "replayed against the deployed stages finds every stage there equal or close, so **no known culprit** "
                "explains it. Compare that stage's saved tensors (`harness check --save-tensors`) by hand, or look "
                "for a difference the catalogue does not hold.")
    focus = baseline.first_divergent()
    first = rounds[0]
    if not causes:
        if first.chosen is not None:
            best = first.chosen
            return (f"The divergence first appears at `{focus}`. No known culprit fully explains it; **{best.name}** "
                    f"({best.culprit}) explains part of it (error at `{focus}` {fmt(first.base.error(focus))} -> "
                    f"{fmt(best.error(focus))}, images diverged there {first.base.diverged(focus)} -> "
                    f"{best.diverged(focus)}), and nothing explains the rest, so it is not taken as a cause. The "
                    "isolated errors of `harness check` show which stage adds the divergence.")
        near = "; ".join(f"{e.name} ({e.culprit}: {e.improvement(e.baseline or first.base, focus).describe()})"
                         for e in candidates(first))
        listed = f"; the best candidates, each below them: {near})" if near else ")"
        return (f"The divergence first appears at `{focus}`: **no known culprit** explains it. None of the "
                f"{len(first.ranked)} culprits of the catalogue improves it beyond noise (an error cut by "
                f"{MIN_ERROR_DROP:.0%}, or {MIN_IMAGES_LEFT:.0%} of the diverged images no longer diverged with the "
                f"error cut by {MIN_IMAGES_ERROR_DROP:.0%}"
                + listed + ". Compare that stage's saved tensors (`harness check --save-tensors`) by hand, or look "
                "for a difference the catalogue does not hold.")
    remains = after.first_divergent if after is not None else final.first_divergent()
    if len(causes) == 1 and remains is None:
        best = first.chosen
        return (f"The divergence first appears at `{focus}`; **{best.name}** ({best.culprit}) explains it: "
                f"{_explained(best, first.base, focus)}.")
    parts = []
    for r in rounds[:max(c.round for c in causes)]:
        where = (f"The divergence first appears at `{r.focus}`" if r.number == 1 else
                 f"With {'that' if r.number == 2 else 'those'} applied, it first appears at `{r.focus}`")
        how = "explains it" if r.explains else "explains part of it"
        before = [*r.base.on_top_of, *([r.base.hypothesis] if r.base.hypothesis else [])]
        replaced = next((f", in place of {x.name}" for x in before if x.culprit == r.chosen.culprit), "")
        parts.append(f"Round {r.number}: {where}; **{r.chosen.name}** ({r.chosen.culprit}{replaced}) {how}"
                     + (f": {_explained(r.chosen, r.base, r.focus)}." if r.explains else
                        f" (error at `{r.focus}` {fmt(r.base.error(r.focus))} -> {fmt(r.chosen.error(r.focus))}; "
                        f"images diverged there {r.base.diverged(r.focus)} -> {r.chosen.diverged(r.focus)})."))
    costs = "; ".join(f"**{c.hypothesis.name}** {_cost(c)}" for c in causes)
    parts.append(f"What each costs in predictions, most first: {costs}." if len(causes) > 1 else
                 f"What it costs in predictions: {costs}.")
    parts.append(remaining_sentence(final, rounds, stopped, len(causes), after))
    return " ".join(parts)


CANDIDATES = 3
"""Hypotheses a conclusion without a cause shows as candidates."""


def candidates(r: Round) -> list[Evaluation]:
    """The round's hypotheses that improved its stage at all (below the thresholds), best first."""
    return [e for e in r.ranked if e.outcomes and e.score(r.focus) < (e.baseline or r.base).score(r.focus)][:CANDIDATES]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _cost(c: Cause) -> str:
    if c.flips is None:
        return "(cost not measurable)"
    return f"({c.flips} {c.without.task.flip_words}, output error +{fmt(c.output_error)})"


def remaining_sentence(final: Evaluation, rounds: tuple[Round, ...], stopped: str, causes: int,
                       after: CheckVerdict | None = None) -> str:
    stage, applied = final.first_divergent(), "With all of them applied" if causes > 1 else "With it applied"
    if after is not None and after.first_divergent is not None and stage is None:
        # the replay sees nothing left; check's own comparison, with the corrected spec, does
        return (f"{applied}, `harness check` still finds a divergence ({after.describe()}) that the replay does not "
                "show: no known culprit explains it.")
    if stage is None:
        return f"{applied}, nothing diverges on the {final.images} images."
    why = {"round bound": f"the search stopped after {len(rounds)} rounds",
           "nothing in the catalogue helps": "no known culprit explains it"}.get(stopped, stopped)
    agreement = final.top1_agreement()
    return (f"{applied}, a divergence remains: it first appears at `{stage}` on "
            f"{final.diverged(stage)} of {final.images} images"
            + (f" ({final.task.agreement_words} {agreement:.1%})" if agreement is not None else "") + f"; {why}.")


def combined_recommendation(causes: tuple[Cause, ...], remaining: Stage | None) -> str | None:
    """One recommendation covering every cause, most costly first, and what remains (``remaining``:
    the first divergent stage left with every cause applied)."""
    if not causes:
        return None
    if len(causes) == 1 and remaining is None:
        return causes[0].advice
    lines = [f"{k}. **{c.hypothesis.name}** {_cost(c)}: {c.advice}" for k, c in enumerate(causes, 1)]
    stage = remaining
    tail = ("With every change, nothing diverges." if stage is None else
            f"With every change, the divergence that remains first appears at `{stage}`.")
    return "\n".join(["Every change, most costly first:", *lines, tail])
