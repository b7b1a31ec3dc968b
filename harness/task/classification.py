"""Classification: class scores out, the top-k classes as the result, a top-1 change as the event.

Exactly the harness's behaviour before tasks existed, now in one place: the scores output
(the one FP32 ``[classes]`` output; of several the one named like logits), logits or
probabilities (the reference's logits compared as their softmax), the ``topk`` result stage
(top-1 agreement, top-k overlap, the reference top-1's probability change), a top-1 change
within the tie margin (:mod:`harness.compare.ties`) a **tie**, and accuracy's top-1/top-k,
per-class recall and precision, flip rate and McNemar's test (:mod:`harness.accuracy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from harness.client import CLASSIFIER, PIPELINES, TaskModels, TopK
from harness.client import LOGITS as LOGITS_OUTPUT
from harness.compare.aggregate import TopKFlips
from harness.compare.stages import topk_result
from harness.compare.ties import default_tie_margin, flip_verdict
from harness.compare.top_k_effect import TopKEffect, evaluate
from harness.errors import ServerStopped
from harness.formatting import fmt
from harness.listing import InputFile, read_input
from harness.model import LABELS_FILENAME, ONNX_FILENAME, check_onnx, export_default, read_labels
from harness.names import identifier, terminal_text
from harness.scores import LOGITS, ScoreKind, detect
from harness.stage import Stage
from harness.task_api import OutputChoice, Section, Task
from harness.task_api.models import DALI_ON_CPU, DALI_TAPS_ON_CPU, ONNX_ON_CPU, ShippedModel
from harness.verdict import Verdict

FLOAT_TYPES = ("TYPE_FP32", "TYPE_FP16")
SCORE_WORDS = ("logit", "prob", "score", "class", "softmax", "pred")
"""Output names that say class scores."""
FLIPS_NOTE = ("A **tie** is a change within the tie margin: the reference's own top-1 was ahead of the deployed "
              "top-1 by no more than the output's error explains. It is listed, not counted as a divergence.")


def vector_outputs(outputs: Sequence) -> list:
    """FP32/FP16 outputs of one dimension of more than one value (``[n]``; ``[1, n]`` unbatched)."""
    return [t for t in outputs if t.data_type in FLOAT_TYPES and len([d for d in t.dims if d != 1]) == 1
            and max(t.dims) > 1]


def describe(tensor) -> str:
    return f"{tensor.name} {tensor.data_type.removeprefix('TYPE_')} {list(tensor.dims)}"


def export_classifier(folder: Path, spec, config) -> Path:
    """EfficientNet-Lite0 (ImageNet-1k) with its labels, at the spec's crop."""
    return export_default(folder, spec.preprocess.crop.size)


def check_classifier(folder: Path, spec, config) -> None:
    """The classifier's ONNX and labels meet the contract (harness.model) and fit the spec's crop."""
    labels = read_labels(folder / LABELS_FILENAME)
    check_onnx(folder / ONNX_FILENAME, spec.preprocess.crop.size, labels=labels)


class Classification(Task):
    name = "classification"
    repository = TaskModels("classify", CLASSIFIER, "input", "logits", LOGITS_OUTPUT,
                            added=("validate_image", "preprocess_dali", "preprocess_dali_stages", "preprocess_dali_taps",
                                   "preprocess_opencv", CLASSIFIER, "classify_dali", "classify_opencv"),
                            engines=(CLASSIFIER,),
                            shipped=(ShippedModel("preprocess_dali", DALI_ON_CPU),
                                     ShippedModel("preprocess_dali_stages", DALI_TAPS_ON_CPU),
                                     ShippedModel(CLASSIFIER, ONNX_ON_CPU, export_classifier,
                                                  "exported EfficientNet-Lite0 to {path} (labels beside it)",
                                                  check_classifier)))
    noun = "class scores"
    output_label = "scores"
    model_words = "classifier"
    result_stage = Stage.TOPK
    result_in_table = True
    """``topk`` is a row of the stage table (it can fail a run), with the summary line under it."""
    output_words = "the logits"
    event_words = ("top-1 change", "top-1 changes")
    flip_words = "top-1 flips"
    agreement_words = "top-1 agreement"
    tie_words = ("top-1 change is a near tie (the reference's top-1 was ahead by at most the tie margin)",
                 "top-1 changes are near ties (the reference's top-1 was ahead by at most the tie margin)")
    csv_fields = ("topk_verdict", "top1_agree", "reference_top1", "deployed_top1", "top1_prob_change", "topk_overlap",
                  "reference_margin")
    """``topk_verdict`` is equal, close, tie or diverged; ``topk_overlap`` is over the run's top-k
    (5 by default); ``reference_margin`` is in the units of the scores compared: logits, or
    probability for a deployment answering probabilities (see harness.compare.ties)."""

    # -- discovery ----------------------------------------------------------------------------
    def choose_output(self, model, choice):
        candidates = vector_outputs(model.outputs)
        if choice is not None:
            named = [t for t in model.outputs if t.name == choice]
            if not named:
                return OutputChoice(None, why=f"model {model.name!r} has no output {choice!r}; "
                                              f"outputs: {', '.join(map(describe, model.outputs))}")
            if named[0] not in candidates:
                return OutputChoice(None, why=f"output {describe(named[0])} of {model.name!r} is not class scores "
                                              "(one FP32 dimension of classes)")
            return OutputChoice(named[0].name, why="named by --output")
        if not candidates:
            return OutputChoice(None, why=f"model {model.name!r} has no output of class scores (one FP32 [classes] "
                                          f"tensor); outputs: {', '.join(map(describe, model.outputs)) or 'none'}")
        preferred = [t for t in candidates if "logit" in t.name.lower()]
        return OutputChoice((preferred or candidates)[0].name, why="the output of class scores")

    def signs(self, tensor, labelled):
        if tensor not in vector_outputs([tensor]):
            return None
        if labelled:
            return f"output {tensor.name} has a label file"
        if any(word in tensor.name.lower() for word in SCORE_WORDS):
            return f"output {tensor.name} is named as class scores"
        return None

    def output_kind(self, name: str, probe: np.ndarray) -> ScoreKind:
        """``probabilities`` when named so or when every row is a distribution, else ``logits``
        (:func:`harness.scores.detect`)."""
        return detect(name, probe)

    # -- comparison -------------------------------------------------------------------------------
    def reference_output(self, output, kind):
        return kind.from_logits(output)

    def output_tolerance(self, kind):
        return kind.default_tolerance()

    def default_margin(self, tolerances, kind):
        return default_tie_margin(tolerances)

    margin_follows_tolerance = True

    def margin_units(self, kind):
        return kind.unit

    def compare_result(self, reference, deployed, isolated, margin, top_k, scores=LOGITS):
        return topk_result(reference, deployed, isolated, margin, top_k, scores)

    def events(self, margin):
        return TopKFlips()

    # -- reports ------------------------------------------------------------------------------------
    def output_note(self, report):
        return (f"the {report.scores_kind}"
                + (" (every class within the output tolerance, and the total variation distance: the probability "
                   "mass that moved)" if report.scores_kind == "probabilities" else "")
                + "; `topk`'s errors are the largest change among the reference's top-k probabilities.")

    def summary_line(self, report):
        top = report.summary.stage(Stage.TOPK)
        if top is None:
            return None
        agree, n, k = top.metric("top1_agree", "mean"), report.summary.compared, report.top_k
        ties, flips = report.summary.ties, len(report.summary.events)
        line = (f"Top-1 agreement: **{agree:.1%}** ({round(agree * n)} of {n} images"
                + (f"; of the {flips} changed, {ties} {'is a tie' if ties == 1 else 'are ties'}" if flips else "")
                + f"); mean top-{k} overlap {top.metric('topk_overlap', 'mean'):.3f}; change in the reference top-1's "
                f"probability: mean {top.metric('top1_prob_change', 'mean'):+.4f}, furthest from zero "
                f"{top.metric('top1_prob_change'):+.4f}.")
        if top.isolated:
            line += (" With the reference input, the deployed classifier alone agrees on "
                     f"{top.metric('top1_agree', 'mean', isolated=True):.1%}.")
        return line

    def headline(self, report):
        ties = report.summary.ties
        if not ties:
            return ""
        return (f" {ties} top-1 {'change is a tie' if ties == 1 else 'changes are ties'} (within the tie margin "
                f"of {fmt(report.tie_margin)} {report.scores_unit}: not a divergence).")

    def sections(self, report):
        flips = report.summary.events
        if not flips:
            return []
        names = getattr(report, "classes", ())

        def named(index: int) -> str:  # the class's name beside its index, where it has one (deploy names them by index)
            name = names[index] if 0 <= index < len(names) else ""
            return f"{index} {name}" if name and name != str(index) else str(index)

        rows = tuple((f.image, f.verdict.value, named(f.reference_top1), named(f.deployed_top1), fmt(f.margin))
                     for f in flips)
        return [Section("Images whose top-1 class changed", FLIPS_NOTE,
                        ("image", "verdict", "reference top-1", "deployed top-1",
                         f"reference margin ({report.scores_unit})"), rows,
                        verdict_column=1)]

    # -- the effect on a labeled set: top-1/top-k accuracy (harness.compare.top_k_effect) ----------------
    labeled_by = "classes"
    effect_from = "top-k"  # the deployed outputs are not kept: 4 KB an image each
    effect_margin_kind = "logits"  # a flip's margin is the reference's logits, whatever the deployment answers
    unshardable = None
    progress_word = "classifying"
    processed_word = "classified"

    def effect_on(self, observed):
        return TopKEffect(evaluate(observed.dataset, observed.predictions, observed.classes, observed.margin,
                                   observed.k), observed.classes)

    # -- harness infer ---------------------------------------------------------------------------------
    def infer(self, client, asked):
        return infer_table(self, client, asked)

    # -- diagnose -------------------------------------------------------------------------------------
    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        flip = flip_verdict(reference, int(np.argmax(deployed)), margin)
        return (Verdict.CLOSE if flip is None else flip), float(flip is not None)


# -- harness infer ------------------------------------------------------------------------------


def infer_table(task, client, asked) -> int:
    """``harness infer``'s table of class scores: the top-k classes of each image through each
    classifier (this repository's pipelines, or each ``--model``), and whether they agree."""
    from rich.progress import track
    from rich.table import Table

    files, skipped = asked.files, asked.skipped
    classifiers = _classifiers(client, asked)
    names = list(classifiers)
    table = Table(title=f"top-{asked.top_k} classes" + (" per model (agree: the same top-1)" if len(names) > 1 else ""))
    table.add_column("image")
    for name in names:
        table.add_column(name)
    if len(names) > 1:
        table.add_column("agree")
    failures = 0
    for path in track(files, description="classifying", console=asked.console, transient=True):
        cells = classify_everywhere(client, path, classifiers, asked.top_k)
        ok = [c for c in cells if not isinstance(c, str)]
        failures += len(ok) < len(cells)
        texts = [f"[red]{terminal_text(c)}[/]" if isinstance(c, str)
                 else "\n".join(f"{t.score:.3f} {terminal_text(t.label)}" for t in c) for c in cells]
        if len(names) == 1:
            table.add_row(terminal_text(identifier(path)), *texts)
        else:
            agree = len(ok) == len(cells) and len({c[0].index for c in ok}) == 1
            table.add_row(terminal_text(identifier(path)), *texts, "yes" if agree else "[yellow]no[/]")
    for entry in skipped:  # every entry a row, as check lists them (not a failure)
        why = f"[dim]skipped: {terminal_text(entry.reason)}[/]"
        table.add_row(terminal_text(entry.name), *([why] * len(names)), *(["-"] if len(names) > 1 else []))
    from rich.console import Console

    Console().print(table)
    return 1 if failures else 0


def classify_everywhere(client, path: Path, classifiers: dict, top_k: int) -> list:
    """Per classifier (name -> ``classify(data, top_k)``), the top-k answer or a one-line
    reason why this image has none. Any failure of this image stays in its row; only a
    server that stopped answering ends the command (exit 2)."""
    from harness.client import ServerUnavailable
    from harness.result import one_line

    try:
        data = read_input(InputFile.of(path))
    except OSError as exc:
        return [f"unreadable: {getattr(exc, 'reason', None) or exc.strerror or exc}"] * len(classifiers)
    cells = []
    for classify in classifiers.values():
        try:
            cells.append(classify(data, top_k))
        except ServerUnavailable as exc:
            raise ServerStopped(client.url, identifier(path), str(exc)) from None
        except Exception as exc:
            cells.append(one_line(exc))
    return cells


def _classifiers(client, asked) -> dict:
    """Column name -> ``classify(data, top_k)``: this repository's pipelines, or each ``--model``."""
    deployed = asked.deployed
    if not deployed.models:
        return {PIPELINES[p].ensemble: (lambda data, k, p=p: client.classify([data], p, k)[0]) for p in asked.pipelines}
    from harness.deployment.base import ImageRequest
    from harness.deployment.discovery import classes_of, image_input, read_model, scores_output, task_output

    out = {}
    for name in deployed.models:
        info = read_model(client, name)
        if deployed.task is not None:  # a task named for a model serving another is refused, saying why
            task_output(info, deployed.task, deployed.output, tasks=asked.tasks)
        request = ImageRequest(name, image_input(info), info.batched)
        scores = scores_output(info, deployed.output, prefer="prob")
        asked.say(f"{name}: image input {request.describe()}, scores {scores.describe()}")
        named = class_names(asked, classes_of(scores))

        def classify(data, k, r=request, s=scores.name, named=named):
            return [t if t.label != str(t.index) or not named else TopK(t.index, named[t.index], t.score)
                    for t in client.top_k(r.model, r.inputs([data]), s, k)]

        out[name] = classify
    return out


def class_names(asked, classes: int) -> list[str] | None:
    """Names for a model without a label file: --class-names, else the repository's, when their
    count is the model's class count (else the class indices stay)."""
    from harness.model import ModelError, read_labels

    try:
        names = read_labels(asked.class_names) if asked.class_names else asked.session.classes()
    except (OSError, ModelError):
        return None
    return names if len(names) == classes else None
