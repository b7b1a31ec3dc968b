"""Which deployed side a job reads, as the user named it: this repository's ``--pipeline``,
or ``--model`` with its ``--output`` and ``--stage`` overrides. The command-line argument
group parses into a :class:`Target`; :func:`open_deployment` turns it into the
:class:`~harness.deployment.base.Deployment` found on the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from harness.deployment.discovery import DeploymentError
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.client import TritonClient
    from harness.deployment.base import Deployment
    from harness.session import Session

PROBE_IMAGES = 5
"""Images tried, in order, as the probe discovery runs through a ``--model``."""


@dataclass(frozen=True)
class Target:
    """``model`` None: this repository's ``pipeline`` (dali or opencv, with its taps model)."""

    pipeline: str = "dali"
    model: str | None = None
    output: str | None = None
    """The output of class scores (None: found)."""
    stages: Mapping[str, str] = field(default_factory=dict)
    """``{step or step.tensor: stage}`` overriding the mapping found (``--stage``)."""
    task: str | None = None
    """``--task`` (None: classification for a pipeline; for a model, the task discovery finds)."""

    @property
    def foreign(self) -> bool:
        """A model that is not one of this repository's ensembles: its training side is the user's."""
        from harness.client import PIPELINES, REPOSITORY_TASKS

        own = {models.ensemble(p) for models in REPOSITORY_TASKS.values() for p in PIPELINES}
        return self.model is not None and self.model not in own

    def note(self) -> tuple[str, ...]:
        """What the report should add about this choice."""
        if self.model is None or self.foreign:
            return ()
        return (f"{self.model} is this repository's own ensemble: --pipeline reads every preprocessing stage from its "
                "taps model, a richer view than its steps give",)


def require_reference_model(targets: Sequence[Target], reference_model: str) -> None:
    """A foreign deployment needs the user's trained model: refuse the repository's stand-ins."""
    from harness.reference.model import CHOICES

    foreign = [t.model for t in targets if t.foreign]
    if foreign and reference_model in CHOICES:
        raise UsageError(f"--model {foreign[0]} is not this repository's ensemble: give the model it was trained as "
                         "with --reference-model PATH (an ONNX or TorchScript file), so the harness can compare "
                         "what training predicts")


def open_deployment(session: "Session", client: "TritonClient", target: Target, images: Sequence[Path],
                    log: Callable[[str], None] = lambda line: None) -> "Deployment":
    """The deployment ``target`` names on ``client``'s server; a ``--model`` is probed with the
    first of ``images`` it accepts (at most :data:`PROBE_IMAGES`) and what was found is logged
    line by line. The spec's ``[deployment.stages]`` apply under ``target.stages``."""
    if target.model is None:
        return session.deployment(client, target.pipeline, task=target.task)
    from harness.deployment.mapping import parse_overrides

    try:
        from_spec = parse_overrides([f"{step}={stage}" for step, stage in session.spec.deployed_stages.items()])
    except ValueError as exc:
        raise UsageError(f"[deployment.stages] of {session.spec_path}: {exc}".replace("--stage ", "")) from None
    stages = {**from_spec, **target.stages}
    problems = []
    for path in images[:PROBE_IMAGES]:
        try:
            probe = path.read_bytes()
        except OSError as exc:
            problems.append(f"{path.name}: {exc.strerror or exc}")
            continue
        try:
            deployment = session.deployment(client, model=target.model, probe=probe, output=target.output,
                                            stages=stages, task=target.task)
        except DeploymentError as exc:
            if "rejected the probe image" not in str(exc):
                raise
            problems.append(f"{path.name}: {exc}")
            continue
        for line in deployment.describe():
            log(line)
        return deployment
    raise UsageError(f"--model {target.model}: none of the first {len(problems)} images could probe it "
                     f"({'; '.join(problems)})")
