"""One image checked: the reference's stages in-process, the deployed ones from the server,
each compared, and each deployed stage also run alone on the reference's previous stage."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.client import InferenceError
from harness.compare.comparators import ARRAYS
from harness.compare.stages import compare_stages
from harness.deployment import DeployedSide
from harness.deployment.base import NotComparable
from harness.errors import ServerStopped, contained, escapes
from harness.listing import InputFile, read_input
from harness.outcome import Side
from harness.reference import Recipe
from harness.reference.model import ReferenceModel, shape_fits
from harness.result import ImageResult, one_line
from harness.spec import SpecError
from harness.stage import DEFAULT_TOP_K, Stage
from harness.task_api import PostprocessError
from harness.tolerance import Tolerance
from harness.verdict import Verdict


@dataclass
class ImageTensors:
    """Both sides' stage tensors of one image (and the isolated runs), for visuals and --save-tensors."""

    reference: dict[str, np.ndarray] = field(default_factory=dict)
    deployed: dict[str, np.ndarray] = field(default_factory=dict)
    isolated: dict[str, np.ndarray] = field(default_factory=dict)
    not_isolated: dict[str, str] = field(default_factory=dict)
    """Stage -> why it could not run alone on the reference's (said on the stage's metrics)."""
    answered: dict[str, np.ndarray] = field(default_factory=dict)
    """What the deployment answered, before the task derived stages from it (``deployed`` holds
    both): what :meth:`ImageChecker.replay` compares another reference with."""
    data: bytes = b""
    """The file's bytes, as read."""


class AnswersAlike:
    """Whether the reference model answers every image alike: each image's output within the
    output ``tolerance`` of the first image's (the stage rule, :data:`ARRAYS`). A model whose
    answers do not depend on the image (a randomly initialised network: logits about 1e-8, one
    class for every photo) agrees with any deployment as well as with itself, so what a change
    costs in its predictions means nothing. Safe to call from several threads."""

    def __init__(self, tolerance: Tolerance):
        self.tolerance = tolerance
        self._first: np.ndarray | None = None
        self._images, self._differ = 0, False
        self._lock = threading.Lock()

    def add(self, output: np.ndarray) -> None:
        with self._lock:
            if self._differ:
                return
            self._images += 1
            if self._first is None:
                self._first = np.array(output)
            elif ARRAYS.judge(self._first, output, self.tolerance).verdict is Verdict.DIVERGED:
                self._differ, self._first = True, None

    @property
    def alike(self) -> bool:
        """Two images or more, and every one answered as the first."""
        with self._lock:
            return not self._differ and self._images >= 2


class ImageChecker:
    """Compares one image at a time; safe to call from several threads."""

    def __init__(
        self,
        side: DeployedSide,
        recipe: Recipe,
        reference_model: ReferenceModel,
        tolerances: dict[str, Tolerance],
        isolate: bool = True,
        top_k: int = DEFAULT_TOP_K,
        *,
        tie_margin: float,
        task=None,
    ):
        """``side``: the deployed side (its deployment and request policy). ``tie_margin``: a
        top-1 change within this many logits of the reference's margin is a tie, not a
        divergence (the job's, :meth:`harness.session.Session.tie_margin`). ``task``: the
        deployment's task configured with another spec (default: the deployment's own)."""
        self.side, self.recipe, self.reference_model, self.tolerances = side, recipe, reference_model, tolerances
        self.isolate, self.top_k = isolate, top_k
        self.tie_margin = tie_margin
        self.task, self.scores = task or side.deployment.task, side.deployment.scores_kind
        """The task compared after the model input, and what the deployed output holds (the
        reference's output is made comparable to it: probabilities as the logits' softmax)."""
        self.answers_alike = AnswersAlike(tolerances[Stage.OUTPUT])
        """Whether the reference model answered every image checked alike (:class:`AnswersAlike`)."""

    # -- one image -----------------------------------------------------------------------
    def check(self, file: InputFile | Path) -> tuple[ImageResult, ImageTensors | None]:
        """One image's result. Whatever goes wrong with this image (a decoder error of any
        library, a pixel limit, memory for an absurd size, a broken custom reference) is
        this image's row with a one-line reason; only :class:`ServerStopped` ends the run."""
        file = file if isinstance(file, InputFile) else InputFile.of(file)
        return self._contained(file.name, lambda: self._check(file))

    def replay(self, name: str, data: bytes, answered: dict) -> tuple[ImageResult, ImageTensors | None]:
        """One image compared exactly as :meth:`check` compares it, against what the deployment
        already answered for it (``answered``: :attr:`ImageTensors.answered`), without asking
        the server again and without isolated runs: how diagnose has its corrected reference
        judged by check's own comparison."""
        return self._contained(name, lambda: self._compare(name, data, lambda: dict(answered), isolate=False))

    @staticmethod
    def _contained(name: str, run) -> tuple[ImageResult, ImageTensors | None]:
        try:
            return run()
        except ServerStopped:
            raise
        except BaseException as exc:  # a task's or the user's sys.exit() too: only a real interrupt ends the run
            if escapes(exc):
                raise
            return ImageResult(name, error=f"comparison failed: {one_line(contained(exc))}"), None

    def _check(self, file: InputFile) -> tuple[ImageResult, ImageTensors | None]:
        name = file.name
        try:
            data = read_input(file)
        except OSError as exc:
            return ImageResult(name, error=f"unreadable: {getattr(exc, 'reason', None) or exc.strerror or exc}"), None
        return self._compare(name, data, lambda: self.side.read(name, data), self.isolate)

    def _compare(self, name: str, data: bytes, read, isolate: bool) -> tuple[ImageResult, ImageTensors | None]:
        """The reference's stages, the deployed ones (``read()``) with what the task derives from
        them, and every stage compared."""
        tensors = ImageTensors(data=data)
        reference_error = deployed_error = None
        try:
            tensors.reference = self.recipe(data)
        except SpecError as exc:  # the recipe itself is wrong, not this image: failed, not a rejection
            return ImageResult(name, error=f"reference recipe: {exc}"), None
        except Exception as exc:  # training could not process this image (cv2.error, PIL, MemoryError, ...)
            reference_error = one_line(exc)
        if reference_error is None:
            problem = self._input_problem(tensors.reference[Stage.INPUT])
            if problem:
                return ImageResult(name, error=problem), None
            output = self.reference_model.logits(tensors.reference[Stage.INPUT][None])[0]
            tensors.reference[Stage.OUTPUT] = self.task.reference_output(output, self.scores)
            self.answers_alike.add(tensors.reference[Stage.OUTPUT])
            try:
                tensors.reference.update(self.task.derive_reference(tensors.reference))
            except PostprocessError as exc:  # the user's --postprocess, not the reference, failed
                return ImageResult(name, error=f"postprocessing: {one_line(exc)}"), None
            except Exception as exc:  # the reference's postprocessing could not process it
                reference_error = one_line(exc)
        try:
            tensors.deployed = read()
            tensors.answered = dict(tensors.deployed)
            tensors.deployed.update(self.task.derive_deployed(tensors.deployed, tensors.reference))
        except PostprocessError as exc:  # the user's --postprocess on the deployed output
            return ImageResult(name, error=f"postprocessing: {one_line(exc)}"), None
        except (InferenceError, ValueError) as exc:  # ValueError: an answer that is not what its outputs promise
            deployed_error = one_line(exc)
        if reference_error and deployed_error:
            return ImageResult(name, error=f"reference: {reference_error}; deployed: {deployed_error}"), None
        if reference_error:
            return ImageResult(name, error=f"reference: {reference_error}", rejected_by=Side.TRAINING), None
        if deployed_error:
            return ImageResult(name, error=f"deployed: {deployed_error}", rejected_by=Side.DEPLOYMENT), None
        if isolate:
            self._isolate(name, tensors)
        stages = compare_stages(tensors.reference, tensors.deployed, self.tolerances, tensors.isolated, self.top_k,
                                self.tie_margin, self.scores, self.task.result_of)
        stages = tuple(replace(s, metrics={**s.metrics, "isolation": f"not run: {tensors.not_isolated[s.stage]}"})
                       if s.stage in tensors.not_isolated else s for s in stages)
        # A deployment answering only boxes may show no raw output (an ensemble whose replay did not reproduce it).
        data = (self.task.image_data(tensors.reference[Stage.OUTPUT], tensors.deployed[Stage.OUTPUT])
                if Stage.OUTPUT in tensors.deployed else None)
        return ImageResult(name, stages, task_data=data), tensors

    def _input_problem(self, model_input: np.ndarray) -> str | None:
        """Why the reference's model input cannot go into the model (a custom recipe's
        wrong shape), or None."""
        expected = self.reference_model.input_shape
        if expected and not shape_fits(tuple(model_input.shape), expected):
            return (f"reference {self.recipe.name} made a {list(model_input.shape)} model input; "
                    f"the {self.task.model_words} takes {list(expected)}")
        return None

    def _isolate(self, name: str, t: ImageTensors) -> None:
        for stage, previous in self.side.deployment.isolates.items():
            # A stage run on several of the reference's (a detector's postprocessing: its output
            # and geometry) is given them by name.
            needed = previous if isinstance(previous, tuple) else (previous,)
            if stage in t.reference and all(k in t.reference for k in needed):
                given = {k: t.reference[k] for k in needed} if isinstance(previous, tuple) else t.reference[previous]
                # The step that produces the scores answers the deployment's kind of scores: as they are.
                try:
                    t.isolated[stage] = self.side.isolate(name, stage, given)
                except ServerStopped:
                    raise
                except (NotComparable, InferenceError) as exc:  # evidence missing, the image still compared
                    t.not_isolated[stage] = one_line(exc)
