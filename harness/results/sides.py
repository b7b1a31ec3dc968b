"""Who played each side of a run, and with which spec: shared by every job's report."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from harness.names import markdown_code
from harness.spec import RECIPES, to_table
from harness.tolerance import Tolerance

Versions = Mapping[str, "str | None"]
"""Package (and ``tritonserver``) -> version, None where not installed."""


@dataclass(frozen=True)
class ReferenceInfo:
    """The training side: the recipe (as described to people) and the reference model."""

    recipe: str
    model: str
    recipe_name: str | None = None
    """The recipe's short name (opencv, torchvision, dali, or a custom one's)."""
    reading: str | None = None
    """The training definition read into the spec's operations (``--reference hf:...``, a Compose),
    and how exactly the spec replays it on the run's photos: the report's first line
    (:meth:`harness.reference.reading.ReadingProof.line`)."""

    @property
    def custom(self) -> bool:
        """The user's own callable or Compose, not a recipe the spec's ``[reference]`` describes."""
        return self.recipe_name is not None and self.recipe_name not in RECIPES

    def spec_line(self, source: str) -> str:
        """How a report names the spec it read: with a custom reference, only its tolerances count."""
        return markdown_code(source) + (f" (tolerances only: the reference is your {self.recipe_name}, not the spec's "
                                "[reference])" if self.custom else "")

    def to_dict(self) -> dict:
        out = {"recipe": self.recipe, "model": self.model}
        if self.recipe_name is not None:
            out["recipe_name"] = self.recipe_name
        if self.reading is not None:
            out["reading"] = self.reading
        return out


@dataclass(frozen=True)
class ServerInfo:
    """The server a run talked to: ``url`` as reported (``embedded server (...)`` for the
    embedded one) and the protocol."""

    url: str
    protocol: str


@dataclass(frozen=True)
class DeployedInfo:
    """The deployed path a check read: the production model (an ensemble, usually), the taps
    model where this repository's is used, and what was found on the server."""

    ensemble: str
    taps_model: str | None
    pipeline: str
    """This repository's pipeline (dali, opencv), or the model's name."""
    server: ServerInfo
    found: tuple[str, ...] = ()
    """What discovery found, one line each (the stage mapping, the step-by-step replay)."""
    deployment: Mapping | None = None
    """The deployment as :meth:`harness.deployment.Deployment.to_dict` gives it."""

    @staticmethod
    def of(deployment, server: ServerInfo, notes: tuple[str, ...] = ()) -> "DeployedInfo":
        """From a :class:`harness.deployment.Deployment` after the run (its replay counted)."""
        replay = getattr(deployment, "replay", None)
        found = (*deployment.describe(), *([replay.describe()] if replay else []), *notes)
        return DeployedInfo(deployment.model, getattr(deployment, "taps_model", None), deployment.label, server,
                            found, deployment.to_dict())

    def to_dict(self) -> dict:
        out = {"ensemble": self.ensemble, "taps_model": self.taps_model, "pipeline": self.pipeline,
               "url": self.server.url, "protocol": self.server.protocol}
        if self.deployment is not None:
            out["deployment"] = {**self.deployment, "found": list(self.found)}
        return out


@dataclass(frozen=True)
class SpecInfo:
    """The spec a run read, and the tolerances it judged with."""

    source: str
    tolerances: Mapping[str, Tolerance]
    deployed: Mapping | None = None
    """The deployed preprocessing as a TOML-like table (None where not known)."""
    reference: Mapping | None = None
    """The reference preprocessing, with its ``recipe``."""

    def to_dict(self) -> dict:
        out: dict = {"source": self.source}
        if self.deployed is not None:
            out["deployed"] = dict(self.deployed)
        if self.reference is not None:
            out["reference"] = dict(self.reference)
        out["tolerances"] = {str(k): dataclasses.asdict(v) for k, v in self.tolerances.items()}
        return out

    @staticmethod
    def of(spec, tolerances: Mapping[str, Tolerance]) -> "SpecInfo":
        """From a loaded :class:`harness.spec.Spec`."""
        return SpecInfo(spec.source, dict(tolerances), to_table(spec.preprocess),
                        {"recipe": spec.reference.recipe, **to_table(spec.reference.preprocess)})
