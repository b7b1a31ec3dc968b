"""Words compared: one image's words paired through the box matching, then each pair step by step.

Each matched pair of words is compared two ways:

- **end to end** (what users see): the reference's text on its own box against the deployed
  text: exact match, the character error rate (edit distance / the reference's length; an
  empty reference counts every deployed character), the score change;
- **step by step** (where it went wrong): each word stage of the deployment against the
  reference's step run on the deployment's own previous stage (the reference's crop of the
  deployed box, its input of the deployed crop, its recognizer on the deployed input, its
  decoding of the deployed output). The first stage beyond its rule is the word's culprit,
  whatever the boxes did before it.

A text change is a **near tie** when the reference's output has a step whose two best class
probabilities lie within the margin and the reference's decoding of the deployed output gives
the deployed text (the decoding itself agrees: the probabilities' noise, not a step, moved it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.verdict import Verdict

WORD_STAGES = ("crop", "input", "output", "text")
"""A word's stages, in pipeline order."""


@dataclass(frozen=True)
class WordRules:
    """The documented defaults of the step-by-step comparison (docs/ocr.md)."""

    crop_mean_atol: float = 1.0
    """A crop (uint8) whose mean difference is within this is close (the same shape needed)."""
    input_atol: float = 0.05
    """Largest input difference of a close input (one uint8 level is 0.0078 after (x/255-0.5)/0.5)."""
    output_atol: float = 0.02
    """Largest probability difference of a close output (ONNX Runtime vs TensorRT fp32)."""
    text_margin: float = 0.1
    """A text change is a near tie where the reference's two best probabilities of a step lie within this."""


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


def step_verdict(stage: str, expected: np.ndarray | str, got: np.ndarray | str, rules: WordRules) -> tuple[Verdict, float]:
    """One word stage: the reference's step on the deployment's previous stage (``expected``)
    against the deployment's (``got``): (verdict, its error: mean levels for a crop, max abs for
    the input and output, edit distance for the text)."""
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

    @property
    def culprit(self) -> str | None:
        """The first word stage beyond its rule; ``text`` where the text changed (not a near tie) and
        no stage before it is seen beyond its rule (a deployment answering its texts alone shows no
        other); None: none."""
        found = next((s for s in WORD_STAGES if s in self.steps and self.steps[s][0] is Verdict.DIVERGED), None)
        if found is None and self.reference_text != self.deployed_text and not self.near_tie:
            return "text"
        return found

    @property
    def verdict(self) -> Verdict:
        if self.culprit is not None:
            return Verdict.DIVERGED
        if self.reference_text != self.deployed_text:
            return Verdict.TIE if self.near_tie else Verdict.DIVERGED
        return max((v for v, _ in self.steps.values()), key=lambda v: v.rank, default=Verdict.EQUAL)

    def to_dict(self) -> dict:
        return {"reference": self.reference, "deployed": self.deployed, "reference_text": self.reference_text,
                "deployed_text": self.deployed_text, "cer": round(character_error_rate(self.reference_text,
                                                                                       self.deployed_text), 4),
                "score_delta": round(self.score_delta, 5), "verdict": self.verdict.value, "culprit": self.culprit,
                "steps": {s: [v.value, None if not np.isfinite(e) else round(e, 6)] for s, (v, e) in self.steps.items()}}
