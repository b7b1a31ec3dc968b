"""Words compared: one image's words paired through the box matching, then each pair step by step.

Each matched pair of words is compared two ways:

- **end to end** (what users see): the reference's answer on its own box against the deployed
  one: the text (exact match, the character error rate: edit distance / the reference's
  length, an empty reference counting every deployed character), the score change, and
  whether each side keeps the word (its score at least ``[recognition] text_score``);
- **step by step** (where it went wrong): each word stage of the deployment against the
  reference's step run on the deployment's own previous stage (the reference's crop of the
  deployed box, its input of the deployed crop, its recognizer on the deployed input, its
  decoding of the deployed output, its text score filter on the deployed score). The first
  stage beyond its rule is the word's culprit, whatever the boxes did before it.

A word whose answer changed (its text, or whether it is kept) with every step within its rule
is a **tie** when the change sits where the reference was unsure: at each step the change
needed (:func:`needed_leads`: the fewest steps, least sure first, whose best class must give
way to the deployment's for the reference's output to read as the deployment's does), the
reference's best class led the deployment's by at most ``text_margin``; and a word kept on one
side only scored within ``score_margin`` of the threshold on both, or changed its text so. A change the **box** made (the
reference reads the deployed box as the deployment does: another crop of the word, which moves
the recognizer as far as it likes) is a tie where that box moved within the detection task's
close rule: the box is the upstream stage, and its rule explains it. Otherwise it is diverged,
and its culprit is the stage that **made** the change: the first of the deployment's box, crop,
input and output which, taken through the reference's remaining steps, gives the deployment's
answer. Both are listed with their evidence (the leads, the stage that made it and its error).
A word neither side keeps is no answer: only its steps are judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.detection.boxes import Detections
from harness.detection.compare import ANSWER_BOXES, DB_BOX_THRESHOLD, compare_detections
from harness.detection.compare import judge_answer as judge_boxes
from harness.task_api.answers import Judgement
from harness.verdict import Verdict

WORD_STAGES = ("crop", "input", "output", "text", "kept")
"""A word's stages, in pipeline order (``kept``: the text score filter)."""
CAUSES = ("box", *WORD_STAGES)
"""What can make a word's answer change, in pipeline order: the detector's box, then each word stage."""


@dataclass(frozen=True)
class WordRules:
    """The documented defaults of the step-by-step comparison (docs/ocr.md)."""

    crop_mean_atol: float = 1.0
    """A crop (uint8) whose mean difference is within this is close (the same shape needed)."""
    input_atol: float = 0.05
    """Largest input difference of a close input (one uint8 level is 0.0078 after (x/255-0.5)/0.5)."""
    output_atol: float = 0.02
    """Largest probability difference of a close output (ONNX Runtime vs TensorRT fp32)."""
    text_margin: float = 0.45
    """A text change is a tie where, at each step the change needed (:func:`needed_leads`), the
    reference's best class led the deployment's by at most this. The aligned DALI recognition
    preprocessing against OpenCV's on the same boxes (``benchmarks/ocr_word_noise.py``, docs/ocr.md):
    of 3,302 words on 958 photos never judged on (hymenoptera with words rendered at two sizes,
    opencv-doc's and matplotlib's photos of text), 14 read otherwise, 13 needing leads of 0.002 to
    0.057 and a one-letter word 0.441."""
    score_margin: float = 0.12
    """A word kept on one side only is a tie where both sides' scores lie within this of the
    threshold (or its text changed within ``text_margin``: a word read as something else scores
    otherwise). Same corpus: the largest text score change of a word read alike, 0.114 (p99 0.006-0.027)."""


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (characters inserted, deleted or replaced)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def character_error_rate(reference: str, deployed: str) -> float:
    """Edit distance over the reference's length (the deployed length where the reference is empty)."""
    errors = edit_distance(reference, deployed)
    return errors / len(reference) if reference else float(errors)


def step_verdict(stage: str, expected: np.ndarray | str | bool, got: np.ndarray | str | bool,
                 rules: WordRules) -> tuple[Verdict, float]:
    """One word stage: the reference's step on the deployment's previous stage (``expected``)
    against the deployment's (``got``): (verdict, its error: mean levels for a crop, max abs for
    the input and output, edit distance for the text, 1 for a kept flag that differs)."""
    if stage == "kept":
        return (Verdict.EQUAL, 0.0) if bool(expected) == bool(got) else (Verdict.DIVERGED, 1.0)
    if stage == "text":
        errors = edit_distance(str(expected), str(got))
        return (Verdict.EQUAL if errors == 0 else Verdict.DIVERGED), float(errors)
    expected, got = np.asarray(expected, np.float32), np.asarray(got, np.float32)
    if expected.shape != got.shape:
        return Verdict.DIVERGED, float("inf")
    if expected.size == 0 or np.array_equal(expected, got):
        return Verdict.EQUAL, 0.0
    diff = np.abs(expected - got)
    error = float(diff.mean()) if stage == "crop" else float(diff.max())
    limit = {"crop": rules.crop_mean_atol, "input": rules.input_atol, "output": rules.output_atol}[stage]
    return (Verdict.CLOSE if error <= limit else Verdict.DIVERGED), error


def needed_leads(reference: np.ndarray, deployed: np.ndarray, text) -> tuple[tuple[int, float], ...]:
    """The fewest steps, least sure first, at which the reference's best class must give way to the
    deployment's for the reference's output to read as the deployment's does: (step, the
    reference's lead there: how far its best class was ahead of the deployment's), by increasing
    lead. ``text(classes)``: a decoder's text of per-step classes. A step whose best class changed
    without changing the text (a character moved by a step, as CTC alignments do) is not needed.
    Outputs of other shapes: none comparable, ``()``."""
    reference, deployed = np.asarray(reference, np.float32), np.asarray(deployed, np.float32)
    if reference.shape != deployed.shape or reference.ndim != 2:
        return ()
    a, b = reference.argmax(axis=1), deployed.argmax(axis=1)
    steps = np.flatnonzero(a != b)
    leads = reference[steps, a[steps]] - reference[steps, b[steps]]
    order = np.argsort(leads, kind="stable")
    wanted, classes = text(b), a.copy()
    for k, i in enumerate(order, 1):
        classes[steps[i]] = b[steps[i]]
        if text(classes) == wanted:
            chosen = order[:k]
            return tuple((int(steps[j]), float(leads[j])) for j in chosen)
    return tuple((int(steps[j]), float(leads[j])) for j in order)


@dataclass(frozen=True)
class WordPair:
    """One matched pair of words (indices into each side's boxes) and what was found of it."""

    reference: int
    deployed: int
    reference_text: str
    deployed_text: str
    score_delta: float
    steps: dict
    """Word stage -> (verdict, error) of the step-by-step comparison."""
    near_tie: bool
    """A changed answer that sits where the reference was unsure (see the module)."""
    reference_kept: bool = True
    deployed_kept: bool = True
    leads: tuple[tuple[int, float], ...] | None = None
    """(step, the reference's lead) at the steps the change needed (:func:`needed_leads`); None:
    the deployment shows no output to tell by."""
    made_by: str | None = None
    """The first of :data:`CAUSES` whose deployed value, taken through the reference's remaining
    steps, gives the deployment's answer (None: the answer did not change, or no word stage is shown)."""
    reference_score: float | None = None
    box_move: tuple[float, float, bool, bool] | None = None
    """The deployed box against the reference's: (its worst corner's move in pixels, the IoU,
    whether the detection task's rule holds it, whether as a move near the binarization threshold)."""

    @property
    def answered(self) -> bool:
        """Whether either side answers the word (keeps it)."""
        return self.reference_kept or self.deployed_kept

    @property
    def changed(self) -> bool:
        """Whether the answer a user gets changed: the text of a kept word, or whether it is kept."""
        return self.answered and (self.reference_kept != self.deployed_kept or self.reference_text != self.deployed_text)

    @property
    def visible_texts(self) -> tuple[str, str]:
        """Each side's text as its users get it ('' for a word it drops)."""
        return (self.reference_text if self.reference_kept else "", self.deployed_text if self.deployed_kept else "")

    @property
    def step_culprit(self) -> str | None:
        """The first word stage beyond its rule (None: none)."""
        return next((s for s in WORD_STAGES if s in self.steps and self.steps[s][0] is Verdict.DIVERGED), None)

    @property
    def culprit(self) -> str | None:
        """The first word stage beyond its rule; else, for a changed answer that is no tie, the
        stage that made it (``text`` where the deployment shows no word stage before its texts:
        the first place the change is seen)."""
        if self.step_culprit:
            return self.step_culprit
        if self.changed and not self.near_tie:
            return self.made_by or "text"
        return None

    @property
    def verdict(self) -> Verdict:
        if self.step_culprit is not None:
            return Verdict.DIVERGED
        if self.changed:
            return Verdict.TIE if self.near_tie else Verdict.DIVERGED
        return max((v for v, _ in self.steps.values()), key=lambda v: v.rank, default=Verdict.EQUAL)

    def evidence(self, rules: WordRules | None = None) -> str:
        """Why a changed answer is a tie or not, in words: the stage that made it and its error,
        the reference's leads where steps changed, the scores against the threshold."""
        parts = []
        if self.step_culprit:
            verdict, error = self.steps[self.step_culprit]
            return f"{self.step_culprit} beyond its rule (error {_num(error)})"
        if self.made_by == "box" and self.box_move is not None:
            corner, iou, within, near = self.box_move
            rule = ("a move near the binarization threshold: a tie by the detection rule" if within and near
                    else f"{'within' if within else 'beyond'} the detection rule")
            parts.append(f"made by the box (a corner moved {corner:.1f} px, IoU {iou:.3f}: {rule})")
        elif self.made_by:
            verdict, error = self.steps.get(self.made_by, (None, None))
            within = f" ({verdict.value}: error {_num(error)})" if verdict is not None else ""
            parts.append(f"made by the {self.made_by}{within}")
        if self.leads:
            shown = ", ".join(f"{lead:.3f} at step {step}" for step, lead in sorted(self.leads, key=lambda x: -x[1])[:3])
            limit = f" (tie margin {rules.text_margin:g})" if rules and self.made_by != "box" else ""
            parts.append(f"the reference's lead at the steps that changed it: {shown}{limit}")
        elif self.leads is None and self.reference_text != self.deployed_text:
            parts.append("no deployed output to compare steps with")
        if self.reference_kept != self.deployed_kept and self.reference_score is not None:
            deployed = self.reference_score + self.score_delta
            limit = f" (margin {rules.score_margin:g})" if rules and self.made_by != "box" else ""
            parts.append(f"scores {self.reference_score:.3f} -> {deployed:.3f} around the threshold{limit}")
        return "; ".join(parts)

    def to_dict(self, rules: WordRules | None = None) -> dict:
        reference, deployed = self.visible_texts
        return {"reference": self.reference, "deployed": self.deployed, "reference_text": self.reference_text,
                "deployed_text": self.deployed_text, "reference_kept": self.reference_kept,
                "deployed_kept": self.deployed_kept, "cer": round(character_error_rate(reference, deployed), 4),
                "score_delta": round(self.score_delta, 5), "verdict": self.verdict.value, "culprit": self.culprit,
                "made_by": self.made_by,
                "leads": None if self.leads is None else [[t, round(lead, 4)] for t, lead in self.leads[:8]],
                "evidence": self.evidence(rules),
                "steps": {s: [v.value, None if not np.isfinite(e) else round(e, 6)] for s, (v, e) in self.steps.items()}}


def _num(value) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.4g}"


# -- a served answer against the photo's answer alone (the load test, watch: harness.task.ANSWER_RULES) --

ANSWER_TEXTS = "TEXTS"
"""An OCR model's words beside its boxes (this repository's ``ocr_*`` models: BYTES, one per box)."""


def judge_answer(known, answer) -> Judgement:
    """An OCR model's served boxes by the detector's rule (:func:`harness.detection.compare.judge_answer`),
    then the word of every matched box: equal, character for character."""
    judged = judge_boxes(known, answer)
    if judged.change is not None:
        return judged
    boxes, scores = ANSWER_BOXES
    comparison = compare_detections(Detections(known[boxes], known[scores]), Detections(answer[boxes], answer[scores]),
                                    DB_BOX_THRESHOLD)

    def text(value) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    known_texts = np.asarray(known[ANSWER_TEXTS]).reshape(-1)
    answer_texts = np.asarray(answer[ANSWER_TEXTS]).reshape(-1)
    changed = [(text(known_texts[m.reference]), text(answer_texts[m.deployed])) for m in comparison.matches
               if text(known_texts[m.reference]) != text(answer_texts[m.deployed])]
    if changed:
        return Judgement(f"{len(changed)} of {len(comparison.matches)} words read otherwise than the photo alone: "
                         + ", ".join(f"{a!r} where it answers {k!r}" for k, a in changed[:3]), math.inf)
    return judged
