"""Small result objects of a comparison, and their plain-dict form (JSON lines, reports)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.compare.tolerance import Verdict

STAGES = ("decode", "resize", "crop", "input", "output", "topk")
"""Every compared stage, in pipeline order."""


@dataclass(frozen=True)
class StageResult:
    """One stage of one image: cumulative comparison, and the stage's error in isolation."""

    stage: str
    verdict: Verdict
    metrics: dict
    isolated_verdict: Verdict | None = None
    isolated: dict | None = None
    """The deployed implementation of this stage fed the reference's previous stage: the
    error this stage adds by itself (None where there is no previous stage to feed)."""
    histogram: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ImageResult:
    """All stages of one image, or why it could not be compared."""

    image: str
    stages: tuple[StageResult, ...] = ()
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def first_divergent(self) -> str | None:
        return next((s.stage for s in self.stages if s.verdict is Verdict.DIVERGED), None)

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.stage == name), None)

    def to_dict(self) -> dict:
        # By hand rather than dataclasses.asdict: that deep-copies every metrics dict.
        stages = [{"stage": s.stage, "verdict": s.verdict.value, "metrics": s.metrics,
                   "isolated_verdict": s.isolated_verdict.value if s.isolated_verdict else None,
                   "isolated": s.isolated, "histogram": s.histogram} for s in self.stages]
        return {"image": self.image, "stages": stages, "error": self.error}

    @staticmethod
    def from_dict(d: dict) -> "ImageResult":
        stages = tuple(
            StageResult(s["stage"], Verdict(s["verdict"]), s["metrics"],
                        Verdict(s["isolated_verdict"]) if s.get("isolated_verdict") else None,
                        s.get("isolated"), s.get("histogram", []))
            for s in d.get("stages", ())
        )
        return ImageResult(d["image"], stages, d.get("error"))
