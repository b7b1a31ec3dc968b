"""A training callable as a spec: its fingerprint.

Most teams hold their training preprocessing as code (a function, a torchvision ``Compose``),
not as a spec. :func:`fingerprint_training` runs that code on the photos of the diagnosis and
searches the recipe space for the spec that reproduces it, the way a deployment is
fingerprinted: the callable's outputs play the deployed side, the spec's ``[reference]`` is
where the search starts, and every culprit of the catalogue is a way it may differ. What comes
out is a :class:`TrainingFingerprint`: the spec found, and how exactly it reproduces the
callable (every stage the callable gives, on every image). The deployment is then diagnosed
against that spec; a callable no spec reproduces is said so, and compared as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.diagnose.catalogue import candidate_hypotheses
from harness.diagnose.deployed import Deployed
from harness.diagnose.evaluation import Diagnoser
from harness.diagnose.findings import Diagnosis
from harness.diagnose.outcomes import Evaluation
from harness.diagnose.rounds import diagnose
from harness.outcome import Outcome
from harness.result import one_line
from harness.results import ImageIssue
from harness.spec import Preprocess
from harness.stage import Stage

MODEL_BATCH = 16


@dataclass(frozen=True)
class TrainingFingerprint:
    """The spec a training callable behaves as, found by the search, and how exactly."""

    name: str
    """The callable, as the user named it (``file.py:name``) and described."""
    recipe: str
    preprocess: Preprocess
    diagnosis: Diagnosis
    """The search against the callable's outputs (its rounds; ``final``: the spec found, on every image)."""
    failed: tuple[ImageIssue, ...] = ()
    """Images the callable could not process (left out of the fingerprint)."""

    @property
    def reproduced(self) -> bool:
        """With the spec found, every stage the callable gives is equal or close on every image."""
        return self.diagnosis.final.first_divergent() is None

    @property
    def final(self) -> Evaluation:
        return self.diagnosis.final

    def in_words(self) -> str:
        """The spec found, in words (:func:`harness.diagnose.advice.fingerprint`)."""
        from harness.diagnose.advice import fingerprint

        return fingerprint(self.recipe, self.preprocess)

    def exactness(self) -> str:
        """How exactly the spec found reproduces the callable, stage by stage, in words."""
        final = self.final
        parts = []
        for stage, counts in final.verdicts.items():
            if counts and stage != Stage.TOPK:
                text = ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items()))
                error = final.error(stage)
                parts.append(f"`{stage}` {text}" + (f" (mean RMSE {error:.3g})" if error else ""))
        agreement = final.top1_agreement()
        top = f"; top-1 agreement {agreement:.1%}" if agreement is not None else ""
        return f"on {final.images} images: " + "; ".join(parts) + top

    def to_dict(self) -> dict:
        from harness.results.diagnosis import evaluation_summary

        return {"callable": self.name, "recipe": self.recipe, "spec_in_words": self.in_words(), "reproduced": self.reproduced,
                "exactness": self.exactness(), "changes_from_the_spec": [c.hypothesis.name for c in self.diagnosis.causes],
                "final": evaluation_summary(self.final), "conclusion": self.diagnosis.conclusion,
                "failed": [f.to_dict() for f in self.failed]}


def callable_outputs(training: Callable[[bytes], dict], names: list[str], data: list[bytes],
                     model) -> tuple[Deployed, list[ImageIssue]]:
    """The callable's stages (and the reference model's logits of its model input) on every
    image, as the deployed side of a search; images it cannot process are listed."""
    import numpy as np

    kept, failed = Deployed([], [], [], []), []
    for name, item in zip(names, data):
        try:
            stages = dict(training(item))
        except Exception as exc:  # noqa: BLE001 - the callable's failure on one image is that image's
            failed.append(ImageIssue(name, f"training callable: {one_line(exc)}", Outcome.REJECTED_BY_TRAINING))
            continue
        kept.names.append(name)
        kept.data.append(item)
        kept.stages.append(stages)
    for start in range(0, len(kept.stages), MODEL_BATCH):
        chunk = kept.stages[start:start + MODEL_BATCH]
        for stages, logits in zip(chunk, model.logits(np.stack([s[Stage.INPUT] for s in chunk]))):
            stages[Stage.OUTPUT] = logits
    return kept, failed


def fingerprint_training(training, name: str, names: list[str], data: list[bytes], recipe: str,
                         reference: Preprocess, deployed_spec: Preprocess, model, tolerances, fp16_model,
                         tie_margin: float, progress: Callable[[str], None] = lambda s: None) -> TrainingFingerprint:
    """Search, from ``recipe`` with ``reference`` (the spec's ``[reference]``), for the spec that
    reproduces ``training`` (a recipe object: the user's callable) on ``data``."""
    outputs, failed = callable_outputs(training, names, data, model)
    if not outputs.names:
        from harness.errors import NothingCompared

        raise NothingCompared(f"the training callable {name} processed none of the {len(names)} images "
                              f"({failed[0].image}: {failed[0].reason})")
    searcher = Diagnoser(outputs, recipe, reference, deployed_spec, model, tolerances, fp16_model,
                         tie_margin=tie_margin)
    def catalogue(*args):  # the callable's outputs ran through the reference model itself: no precision culprit
        return [h for h in candidate_hypotheses(*args) if not h.fp16]

    try:
        found = diagnose(searcher, None, name, catalogue, progress=lambda text: progress(f"training: {text}"))
        final_recipe, final_preprocess, *_ = searcher.setting([c.hypothesis for c in found.causes])
    finally:
        searcher.close()
    failed += [ImageIssue(f.image, f.reason.replace("reference:", "spec's recipe:"), f.outcome)
               for f in searcher.rejected_by_training]
    return TrainingFingerprint(name, final_recipe, final_preprocess, found, tuple(failed))
