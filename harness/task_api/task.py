"""What a task is: :class:`Task`, everything the harness does after the model input.

A task says which deployed output it reads (and how discovery recognises it), how the raw
``output`` becomes its result (the ``postprocess`` stage), how two results are compared
(metrics, tolerances with documented defaults, verdicts, the near-threshold cases listed
rather than failed), the per-image events users care about, the effect on a labeled set,
its CSV columns and its report sections, and what ``diagnose`` minimises at the output.

Everything else (decoding, the preprocessing stages, the raw output compared as a tensor,
the request loop, the files, the exit statuses) is shared. A new task is one module with a
:class:`Task` subclass, registered in :mod:`harness.task` (the registry, above the tasks; as
torchvision v2 registers a kernel per type, and Polygraphy takes a comparator and a postprocess
function). The comparison protocol it judges a result by is :mod:`harness.task_api.comparator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from harness.errors import UsageError
from harness.result import ImageResult, StageResult
from harness.scores import ScoreKind
from harness.stage import Stage
from harness.task_api.effect import Observed
from harness.task_api.known_results import KnownCheck, KnownResults
from harness.tolerance import Tolerance
from harness.verdict import Verdict

__all__ = ["Event", "Events", "OutputChoice", "PostprocessError", "ResultCulprit", "Section", "Task", "claim", "like",
           "verdict_cells"]


class PostprocessError(ValueError):
    """A task's postprocessing (the user's ``--postprocess``) failed on one image's output: that
    image's failed row, named as the postprocessing (not the reference, not the deployment,
    whose outputs it read)."""


@dataclass(frozen=True)
class OutputChoice:
    """The deployed output a task reads, or why none fits: what discovery asks a task."""

    name: str | None
    """The output (None: none fits)."""
    kind: str = ""
    """What it holds, in the task's words (``logits``, ``probabilities``, ``embedding``)."""
    why: str = ""
    """Why it was chosen, or why nothing fits (one line, for people)."""


@dataclass(frozen=True)
class Section:
    """A table of a report, in the task's words: markdown and HTML render it alike."""

    title: str
    note: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    verdict_column: int | None = None
    """The column holding a verdict (coloured in HTML, bold when diverged in Markdown)."""
    name_columns: tuple[int, ...] = (0,)
    """The columns holding image names (Markdown shows them as code spans, literally)."""


@dataclass(frozen=True)
class Event:
    """One image's event a user cares about (a top-1 change, a nearest-neighbour change):
    ``tie`` (within what the output's error explains: listed, not a divergence) or ``diverged``."""

    image: str
    verdict: Verdict
    details: Mapping[str, Any] = field(default_factory=dict)
    """The task's fields (JSON-able), in its report's order."""

    def to_dict(self) -> dict:
        return {"image": self.image, "verdict": self.verdict.value, **self.details}


@dataclass(frozen=True)
class ResultCulprit:
    """A culprit of the task's result step, for diagnose: the reference's ``[postprocess]``
    with ``changes`` applied."""

    name: str
    culprit: str
    changes: tuple[tuple[str, Any, Any], ...]
    """(key, reference value, hypothesized value) of each key changed."""


def verdict_cells(stats) -> tuple[str, str]:
    """A result stage's verdict (bold when diverged) and its counts (equal / close / diverged,
    the ties beside them), as a task's :meth:`Task.result_row` shows them."""
    counts = " / ".join(str(stats.count(v)) for v in (Verdict.EQUAL, Verdict.CLOSE, Verdict.DIVERGED))
    ties = stats.count(Verdict.TIE)
    counts += f" ({ties} {'tie' if ties == 1 else 'ties'})" if ties else ""
    return (f"**{stats.verdict.value}**" if stats.verdict is Verdict.DIVERGED else stats.verdict.value), counts


def without_leading_ones(shape, keep: int = 0) -> tuple[int, ...]:
    """``shape`` (an array's, or a config's dims) without its leading axes of one, down to ``keep``
    axes: what a model without batching adds to one image's tensor (its batch axis of one, and an
    NCHW map's channel axis of one: ``[1, 1, H, W]``). The one rule for a served tensor's leading ones."""
    shape = tuple(shape)
    while len(shape) > keep and shape[0] == 1:
        shape = shape[1:]
    return shape


def like(array: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``array`` reshaped to ``reference``'s shape where the two differ only by leading axes of one
    (a model without batching whose output keeps a batch axis of one); else as it is."""
    array, reference = np.asarray(array), np.asarray(reference)
    if array.shape != reference.shape and without_leading_ones(array.shape) == without_leading_ones(reference.shape):
        return array.reshape(reference.shape)
    return array


def claim(model, tasks: Sequence["Task"]) -> tuple["Task", str]:
    """The task ``model`` (a ``ModelInfo``) serves among ``tasks`` (in order; the first is the
    default), and why: the first whose signs it shows, a task whose sign is a structure
    (:attr:`Task.claims_first`) asked first, the stronger structure before; else the default."""
    for task in sorted(tasks, key=lambda t: -int(t.claims_first)):
        why = task.claims(model)
        if why:
            return task, why
    return tasks[0], "the default task"


class Events:
    """Folds the run's images into the task's events (:meth:`Task.events`): one image at a
    time, memory bounded by what the task keeps per image."""

    task: ClassVar[str]
    """The task's name (recorded in the summary)."""
    flips_are_events: ClassVar[bool] = False
    """The events are top-1 flips, which the summary also keeps as its ``flips`` (classification)."""

    def add(self, result: "ImageResult") -> None:
        raise NotImplementedError

    def result(self) -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        """(the events, sorted by image; the run-level figures the task reports, JSON-able)."""
        raise NotImplementedError


class Task:
    """Base class of a task; a subclass sets the class attributes and implements the hooks."""

    name: ClassVar[str]
    """How ``--task`` names it."""
    repository: ClassVar[Any] = None
    """This repository's models serving the task (a :class:`harness.client.TaskModels`: the
    ensemble of each pipeline, the model it ends in, the spec they read): what ``--pipeline``
    reads. None: the repository deploys no model of it (``--model`` only)."""
    result_stage: ClassVar[Stage] = Stage.POSTPROCESS
    """The stage holding the task's result, compared after ``output``."""
    result_in_table: ClassVar[bool] = True
    """The result stage is a row of the stage table (else the task's summary line tells it)."""
    output_words: ClassVar[str] = "the raw model output"
    """What ``output`` holds, in a sentence of the report."""
    event_words: ClassVar[tuple[str, str]] = ("change", "changes")
    """How one and several events are called."""
    flip_words: ClassVar[str] = "changes"
    """How diagnose counts the events a cause costs (``top-1 flips``)."""
    agreement_words: ClassVar[str] = "agreement"
    """How diagnose names the share of images without an event (``top-1 agreement``)."""
    tie_words: ClassVar[tuple[str, str]] = ("change is a near tie", "changes are near ties")
    """A near-threshold event, one and several, for diagnose's conclusion."""

    # -- set-up ---------------------------------------------------------------------------
    def configure(self, spec, postprocess: str | None = None) -> "Task":
        """This task bound to what a job's spec says beyond the stages (a detector's
        postprocessing: the ``[postprocess]`` table, or ``postprocess``, the user's
        ``FILE.py:NAME``); tasks that need nothing more return themselves."""
        if postprocess is not None:
            from harness.errors import UsageError

            raise UsageError(f"--postprocess makes boxes of a detector's output; the {self.name} task has none")
        return self

    # -- discovery ------------------------------------------------------------------------
    output_label: ClassVar[str] = "output"
    """How a deployment's description names the output read (``scores``)."""
    model_words: ClassVar[str] = "model"
    """How messages name the model (``classifier``)."""
    noun: ClassVar[str] = "a result"
    """What the output holds, with its article (``class scores``, ``an embedding``), for messages."""
    result_words: ClassVar[str] = "the result's outputs"
    """What :meth:`result_outputs` hold, plural, for messages (``the boxes``)."""

    def choose_output(self, model, choice: str | None) -> OutputChoice:
        """The output this task reads of ``model`` (a :class:`harness.deployment.discovery.ModelInfo`:
        ``name``, ``outputs``, ``labelled``), ``choice`` the user's ``--output``;
        ``OutputChoice(None, why=...)`` (a sentence naming the model) when none fits."""
        raise NotImplementedError

    def named_output(self, model, choice: str, kind: str) -> OutputChoice:
        """The output ``choice`` (the user's ``--output``) of ``model`` as holding ``kind``, or why
        there is none of that name."""
        if not any(t.name == choice for t in model.outputs):
            return OutputChoice(None, why=f"model {model.name!r} has no output {choice!r}; outputs: "
                                          f"{', '.join(t.describe() for t in model.outputs)}")
        return OutputChoice(choice, kind, why="named by --output")

    def _setup(self):
        """The task's configuration (:meth:`configure`'s), refused while there is none."""
        if getattr(self, "setup", None) is None:
            raise RuntimeError(f"the {self.name} task was not configured with a spec (Task.configure)")
        return self.setup

    def signs(self, tensor, labelled: bool) -> str | None:
        """Why one output (a ``TensorInfo``; ``labelled``: it has a label file) looks like this
        task's (None: no sign of it)."""
        return None

    def claims(self, model) -> str | None:
        """Why this task is what ``model`` serves (None: no sign of it): how discovery picks the
        task when ``--task`` is not given."""
        return next((why for t in model.outputs if (why := self.signs(t, t.name in model.labelled))), None)

    claims_first: ClassVar[bool | int] = False
    """Its sign is a structure of several outputs (a detector's boxes and scores), stronger than
    a name: discovery asks it before the others (EfficientNMS's ``det_scores [100]`` is named
    like class scores too). A number ranks structures: a larger one is asked before (OCR's 2,
    texts beside boxes, before detection's ``True``, boxes alone)."""

    def result_outputs(self, model, choice: str | None = None):
        """The outputs holding the task's result when ``model`` computes it itself (a detector's
        :class:`harness.detection.outputs.BoxOutputs`: ``names``, ``describe()``, read by
        :meth:`read_answer`); None: the result is made here from the raw output. ``choice``: the
        user's ``--output``, where it names one of them (an OCR model's texts)."""
        return None

    def settle_results(self, outputs, answer: Mapping[str, np.ndarray], size: tuple[int, int] | None):
        """:meth:`result_outputs` ``outputs`` as one probe's ``answer`` (outputs by name, batch axis
        removed; ``size``: the probe image's (height, width)) tells how to read them (a box
        coding); as they are by default."""
        return outputs

    def served_results(self, names: tuple[str, ...]):
        """How :meth:`read_answer` reads this repository's ensembles' result outputs ``names``
        (:attr:`harness.client.TaskModels.results`): an object with ``names``."""
        raise NotImplementedError(f"the {self.name} task reads no result from a deployment's answer")

    answer_extras: ClassVar[tuple[str, ...]] = ()
    """Outputs a deployment's answer may hold beside the output and the result, read when the
    model has them (a detector's ``GEOMETRY``: what its resize did)."""

    def read_answer(self, answer: Mapping[str, np.ndarray], outputs) -> dict:
        """The stages one image's answer (outputs by name, batch axis removed) holds of
        :meth:`result_outputs` ``outputs``."""
        raise NotImplementedError(f"the {self.name} task reads no result from a deployment's answer")

    def output_kind(self, name: str | None, probe: np.ndarray | None) -> "ScoreKind":
        """What an output holds (:mod:`harness.scores`), read from one probe answer (the
        reference is made comparable to it); ``name`` None: the deployment answers only
        :meth:`result_outputs`."""
        raise NotImplementedError

    output_shaped: ClassVar[bool] = False
    """The raw output keeps its shape (a map [1, H, W], a head), as the postprocessing takes it;
    else it is flattened to a vector (a classifier's ``[1, 1000]`` unbatched is its 1000 scores)."""

    # -- the reference ----------------------------------------------------------------------
    def reference_output(self, output: np.ndarray, kind: "ScoreKind") -> np.ndarray:
        """The reference model's raw output made comparable to a deployed output of ``kind``."""
        return output

    # -- the stages after the model --------------------------------------------------------
    def derive_reference(self, stages: dict) -> dict:
        """Stages the task derives on the reference side once ``output`` is there (a detector's
        geometry and boxes); default none: the result is computed from the outputs when compared."""
        return {}

    def derive_deployed(self, deployed: dict, reference: dict) -> dict:
        """Stages the task derives on the deployed side from what the deployment answered
        (a detector's boxes from a raw output); default none."""
        return {}

    # -- comparison ---------------------------------------------------------------------------
    def result_of(self, reference: dict, deployed: dict, isolated: dict, margin: float, top_k: int,
                  scores: "ScoreKind") -> "StageResult | None":
        """The result stage of one image from both sides' stage dicts (and the isolated runs'):
        by default :meth:`compare_result` on the two ``output`` tensors; None when a side has none."""
        out = Stage.OUTPUT
        if out not in reference or out not in deployed:
            return None
        return self.compare_result(reference[out], deployed[out], isolated.get(out), margin, top_k, scores)

    def output_tolerance(self, kind: "ScoreKind") -> Tolerance | None:
        """The raw output's default tolerance for a deployed output of ``kind`` (None: the spec's rule)."""
        return None

    def default_margin(self, tolerances: Mapping[str, Tolerance], kind: "ScoreKind") -> float:
        """The near-threshold margin (``--tie-margin``) by default, in the units of :attr:`margin_units`."""
        raise NotImplementedError

    margin_follows_tolerance: ClassVar[bool] = False
    """The default margin is the output tolerance's (so ``harness compare`` derives it again from
    run A's tolerances, as classification always did); else run A's recorded margin is kept."""

    def margin_units(self, kind: "ScoreKind") -> str:
        return ""

    def compare_result(self, reference: np.ndarray, deployed: np.ndarray, isolated: np.ndarray | None,
                       margin: float, top_k: int, scores: "ScoreKind") -> "StageResult":
        """The result stage of one image, from both raw outputs (and the isolated model's);
        ``scores``: what the deployed output holds."""
        raise NotImplementedError

    def image_data(self, reference: np.ndarray, deployed: np.ndarray) -> Mapping[str, Any] | None:
        """What :meth:`events` needs of one image beyond its stage results (JSON-able; kept in
        images.jsonl so that ``--resume`` and ``harness merge`` have it). None: nothing."""
        return None

    def events(self, margin: float) -> Events:
        """A fresh fold of the run's images into events."""
        raise NotImplementedError

    def event_fails(self, event, fail_on: str) -> bool:
        """Whether an event fails a run: a divergence always, a tie with ``--fail-on tie``."""
        return Verdict(event.verdict).rank >= Verdict(fail_on).rank

    # -- files and reports ------------------------------------------------------------------------
    csv_fields: ClassVar[tuple[str, ...]] = ()
    """per_image.csv's columns of the result stage."""

    def csv_values(self, stage: "StageResult | None") -> list:
        if stage is None:
            return [""] * len(self.csv_fields)
        return [stage.verdict.value, *(stage.metrics.get(f, "") for f in self.csv_fields[1:])]

    def output_note(self, report) -> str:
        """What the report's note on its metrics says of ``output`` (and the result stage), a sentence's end."""
        return f"{self.output_words}."

    def summary_line(self, report) -> str | None:
        """One paragraph under the stage table (a :class:`harness.results.StageReport`)."""
        return None

    def headline(self, report) -> str:
        """What the headline adds about the events (empty: nothing)."""
        return ""

    def sections(self, report) -> list[Section]:
        """The task's tables of a check's (or comparison's) report."""
        return []

    def result_row(self, stats) -> list[str] | None:
        """The result stage's row of the stage table, in its columns (stage, verdict, counts,
        worst error, mean error, isolated worst error, quality); None: the generic row."""
        return None

    # -- the effect on a labeled set (harness accuracy) ---------------------------------------------
    labeled_by: ClassVar[str] = "labels"
    """What a labeled set gives each image: ``classes`` (the model's class names, from an
    ImageFolder or a CSV: classification), ``labels`` (the set's own labels: an embedding's
    retrieval), ``boxes`` (COCO JSON: a detector's) or ``masks`` (a folder of PNG masks of
    the images' stems: a segmenter's)."""
    effect_from: ClassVar[str] = "outputs"
    """How ``harness accuracy`` reads each path: ``top-k`` (every image's top-k classes, a batch at
    a time; the reference's logits too), ``outputs`` (the same and every image's raw output) or
    ``results`` (every image's stages up to the result stage, derived as check derives them, and
    each deployed path's changes as :meth:`result_of` judges them)."""
    effect_margin_kind: ClassVar[str | None] = None
    """The scores the effect's tie margin is in (None: the deployed output's; ``logits``: the
    reference's logits, whatever the deployment answers)."""
    unshardable: ClassVar[str | None] = "its effect is scored over the whole labeled set at once"
    """Why ``harness accuracy --shard`` cannot score the task (None: a shard's predictions are
    pooled by ``harness merge`` and scored by :meth:`effect_on` once)."""
    progress_word: ClassVar[str] = "predicting"
    """What ``harness accuracy``'s progress bar says it is doing (``classifying``)."""
    processed_word: ClassVar[str] = "processed"
    """What every path did to an image scored, in messages (``classified``)."""

    def effect_on(self, observed: "Observed"):
        """The effect on a labeled set (:mod:`harness.task_api.effect`): the one hook ``harness
        accuracy`` and ``harness merge`` ask. By default :meth:`effect` of the raw outputs, or
        :meth:`effect_of_results` of the result stages, as :attr:`effect_from` reads them."""
        if self.effect_from == "results":
            return self.effect_of_results(observed.dataset, observed.results, observed.changes)
        return self.effect(observed.labels(), observed.outputs(), observed.margin)

    def effect(self, labels: Sequence[str | None], outputs: Mapping[str, np.ndarray], margin: float):
        """The effect on a labeled set from the raw outputs (``outputs``: path -> [images, ...],
        the reference first; ``labels`` by image in the same order)."""
        raise NotImplementedError(f"the {self.name} task measures no effect from raw outputs")

    def effect_of_results(self, dataset, results: Mapping[str, Mapping[str, dict]], changes: Sequence[Mapping]):
        """The effect on a labeled set from every path's stage dicts (path -> image -> stages,
        the reference first) and each deployed path's changed images (image -> ``tie`` or
        ``diverged``); its ``evaluated`` names the images it scored."""
        raise NotImplementedError(f"the {self.name} task measures no effect from its results")

    # -- harness infer ------------------------------------------------------------------------------
    def infer(self, client, asked) -> int:
        """``harness infer``: each image's answer through each deployed model, as a table
        (``asked``: :class:`harness.cli.serving.Asked`: the models or pipelines, ``top_k``, the
        files, ``say``/``console``); the exit status (1: an image had no answer)."""
        raise UsageError(f"harness infer has no table for the {self.name} task")

    # -- preflight ----------------------------------------------------------------------------------
    known_results: ClassVar[KnownResults | None] = None
    """What ``harness preflight --record`` keeps of the task's served result, and ``preflight --task``
    holds a server to by :meth:`check_known_results` (None: only the preprocessing's and the
    classifier's known answers, as for every task)."""

    def check_known_results(self, served: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]],
                            recorded: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]],
                            failed: Mapping[tuple[str, str], str], repository, prefix: str = "") -> list[KnownCheck]:
        """Preflight's rows holding ``served`` (photo -> pipeline -> output, a server's answers of
        :attr:`known_results`; ``failed``: (photo, pipeline) -> why that request was refused) to
        ``recorded`` (the same, of a record), by the task's own rule. ``repository``: the model
        repository (its specs); ``prefix`` starts each row's name (``record ``: a record held to another)."""
        raise NotImplementedError(f"the {self.name} task declares known results but no check of them")

    # -- diagnose -----------------------------------------------------------------------------------
    def diagnose_result(self, reference: np.ndarray, deployed: np.ndarray, gallery: np.ndarray | None,
                        index: int, margin: float) -> tuple[Verdict, float]:
        """What ``diagnose`` counts at the result stage for one image under one setting:
        (verdict: ``close``, or the event's ``tie``/``diverged``; 1.0 when the event happened
        else 0.0). ``gallery``: :meth:`diagnose_gallery` of the deployed outputs."""
        raise NotImplementedError

    def diagnose_hypotheses(self) -> list["ResultCulprit"]:
        """The task's own culprits after the model, as changes to the reference's ``[postprocess]``
        (diagnose tries each as a hypothesis; the changes reach :meth:`diagnose_result` in its
        ``context``); none by default."""
        return []

    def diagnose_gallery(self, deployed: Sequence[np.ndarray]) -> np.ndarray | None:
        """What :meth:`diagnose_result` compares each image with, from every deployed output."""
        return None
