"""OCR: the words of an image. The detection task's stages and boxes, then each box's word.

- **Boxes**: as the detection task compares them (the detector's raw map, its geometry, the
  boxes matched one to one: :mod:`harness.task.detection`). A word whose box is missed or
  extra is reported as such (the boxes' ``missed`` and ``extra``).
- **Words** of the matched boxes (:mod:`harness.ocr.compare`): each side's words as its
  pipeline reads them (the reference: the spec's ``[reference.recognition]`` replayed by
  :mod:`harness.ocr.recognition` with the recognizer's ONNX; the deployment: its ``TEXTS`` and
  ``TEXT_SCORES``, and its word stage taps ``WORD_*`` when it answers them), compared end to
  end (exact match, character error rate, score change) and step by step (``crop``,
  ``input``, ``output``, ``text``: the reference's step on the deployment's previous stage),
  whose first stage beyond its rule is the word's culprit.
- **Result** (``postprocess``): the boxes' verdict and the words' together; an image whose
  boxes or words changed is the event. A text change whose reference output holds a step
  within the margin of its second best class, and which the reference's decoding of the
  deployed output reproduces, is a near tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from harness.client import TaskModels
from harness.detection.boxes import Detections, greedy_match, iou_matrix
from harness.errors import UsageError
from harness.formatting import fmt
from harness.ocr.compare import WORD_STAGES, WordPair, WordRules, character_error_rate, edit_distance, step_verdict
from harness.ocr.tensors import TEXT_SCORES, TEXTS, WORD_TAPS, decode_texts, pack_ragged, unpack_ragged
from harness.result import StageResult
from harness.scores import DETECTION
from harness.stage import GEOMETRY_TENSOR, Stage
from harness.task.base import Event, OutputChoice, Section
from harness.task.detection import Detection, DetectionEvents, DetectionSetup, as_deployed_codes
from harness.verdict import Verdict

WORD_STEPS = "WORD_STEPS"
"""The deployed side's key of the step-by-step comparison: [words, 4 stages, (verdict rank, error)]."""
MATCH_IOU = 0.5
MAX_LISTED = 20
"""Word changes listed per image (report.json, the report's table)."""


@dataclass(frozen=True)
class RecognitionSetup:
    """Each side's ``[recognition]`` (:class:`harness.ocr.recognition.Recognition`) and the rules."""

    reference: Any
    deployed: Any
    rules: WordRules = WordRules()


class OcrEvents(DetectionEvents):
    """The images whose boxes or words changed, and the run's box and word totals."""

    task = "ocr"

    def __init__(self, margin: float):
        super().__init__(margin)
        self.words = dict.fromkeys(("words_matched", "words_exact", "word_ties", "reference_chars", "char_errors"), 0)
        self.culprits: dict[str, int] = {}

    def add(self, result) -> None:
        super().add(result)
        post = result.stage(Stage.POSTPROCESS)
        if post is None:
            return
        m = post.metrics
        for key in self.words:
            self.words[key] += int(m.get(key) or 0)
        for change in m.get("word_changes") or ():
            if change.get("culprit"):
                self.culprits[change["culprit"]] = self.culprits.get(change["culprit"], 0) + 1
        if self.events and self.events[-1].image == result.image:  # the detection fold's event: add the words
            e = self.events[-1]
            self.events[-1] = Event(e.image, e.verdict, {**e.details, "words_matched": m.get("words_matched"),
                                                         "words_exact": m.get("words_exact"), "cer": m.get("cer"),
                                                         "word_culprit": m.get("word_culprit"),
                                                         "word_changes": m.get("word_changes") or []})

    def result(self):
        events, figures = super().result()
        w = self.words
        cer = w["char_errors"] / w["reference_chars"] if w["reference_chars"] else None
        accuracy = w["words_exact"] / w["words_matched"] if w["words_matched"] else None
        return events, {**figures, **w, "cer": cer, "word_agreement": accuracy, "word_culprits": self.culprits}


class Ocr(Detection):
    """The OCR task; :meth:`configure` binds it to a spec's postprocessing and ``[recognition]``."""

    name = "ocr"
    # The detection task's models and the recognizer behind them (docs/ocr.md): the raw output is
    # the detector's map, the boxes and words come from ocr_<pipeline> (Python-backend BLS).
    repository = TaskModels("ocr", "detector", "x", "fetch_name_0", "PROBABILITY", spec="ocr.toml",
                            preprocess_prefix="detect_", results=("BOXES", "SCORES"),
                            postprocess_model="detect_postprocess",
                            added=(*Detection.repository.added, "recognizer", "ocr_preprocess_dali", "ocr_dali", "ocr_opencv",
                                   "ocr_dali_taps", "ocr_opencv_taps"),
                            engines=("detector", "recognizer"), answer_suffix="_taps")
    noun = "words"
    result_words = "the boxes and words"
    output_words = "the detector's raw output (a probability map)"
    event_words = ("word or box change", "word or box changes")
    flip_words = "images with word or box changes"
    agreement_words = "word agreement"
    tie_words = ("change is a near tie", "changes are near ties")
    csv_fields = (*Detection.csv_fields, "words_matched", "words_exact", "cer", "word_culprit")
    answer_extras = (GEOMETRY_TENSOR, TEXTS, TEXT_SCORES, *(name for pair in WORD_TAPS.values() for name in pair))

    def __init__(self, setup: DetectionSetup | None = None, recognition: RecognitionSetup | None = None):
        super().__init__(setup)
        self.recognition = recognition

    # -- set-up -------------------------------------------------------------------------------
    def configure(self, spec, postprocess: str | None = None) -> "Ocr":
        from harness.ocr.recognition import parameters

        detection = Detection.configure(self, spec, postprocess)
        if spec.recognition is None:
            raise UsageError(f"--task ocr: the spec ({spec.source}) has no [recognition] table: nothing says how the "
                             "words of the boxes are read (model_repository/ocr.toml has the repository's)")
        return Ocr(detection.setup, RecognitionSetup(parameters(spec.reference.recognition), parameters(spec.recognition)))

    def _recognition(self) -> RecognitionSetup:
        if self.recognition is None:
            raise RuntimeError("the ocr task was not configured with a spec (Task.configure)")
        return self.recognition

    @cached_property
    def recognizer(self):
        from harness.ocr.recognizer import TextRecognizer

        return TextRecognizer()

    def decoder(self, p):
        from harness.ocr.recognition import CtcDecoder

        return CtcDecoder(self.recognizer.characters, p.blank_index)

    # -- discovery ------------------------------------------------------------------------------
    @staticmethod
    def _without_taps(model):
        """``model`` without this repository's word stage taps (``WORD_*``: read by name)."""
        from dataclasses import replace

        taps = {name for pair in WORD_TAPS.values() for name in pair}
        return replace(model, outputs=tuple(t for t in model.outputs if t.name not in taps))

    claims_first = 2
    """Texts beside boxes: asked before the detection task (boxes alone, ``True``)."""

    def claims(self, model):
        words = self.result_outputs(model)
        return f"it answers {words.describe()}" if isinstance(words, WordOutputs) else None

    infer_extras = (TEXTS,)

    def infer_labels(self, stages):
        """Each box's word, from the stages :meth:`read_answer` read, or None where it read none."""
        return None if TEXTS not in stages else [str(t) for t in stages[TEXTS]]

    def choose_output(self, model, choice):
        model = self._without_taps(model)
        texts, why = find_texts(model, choice)
        if texts is None and why:  # several outputs could be the texts
            return OutputChoice(None, why=why)
        if texts is not None and choice == texts.name:  # --output names the texts: the raw output is found beside
            return self.raw_beside(model, self.result_outputs(model, choice))
        return super().choose_output(model, choice)

    def result_outputs(self, model, choice=None):
        """The boxes (as the detection task finds them) and, beside them, the texts (:func:`find_texts`)
        and the words' scores (:func:`find_word_outputs`); the boxes alone where the model answers no
        texts."""
        model = self._without_taps(model)
        return find_word_outputs(model, choice) or super().result_outputs(model)

    def read_answer(self, answer, outputs) -> dict:
        """The boxes (as the detection task reads them), the texts (UTF-8: a word that is not is
        this image's error) and their scores, and the word stage taps where answered. ``outputs``:
        :class:`WordOutputs`, or this repository's boxes (its texts ``TEXTS``, ``TEXT_SCORES`` by name)."""
        words = outputs if isinstance(outputs, WordOutputs) else WordOutputs(
            outputs, TEXTS if TEXTS in answer else None, TEXT_SCORES if TEXT_SCORES in answer else None)
        out = super().read_answer(answer, words.boxes)
        count = len(out[Stage.POSTPROCESS])
        if words.texts is not None:
            texts = decode_texts(answer[words.texts])
            if len(texts) != count:
                raise ValueError(f"{len(texts)} texts in {words.texts} for {count} boxes")
            out[TEXTS] = np.array(texts, dtype=str)
        if words.text_scores is not None:
            out[TEXT_SCORES] = np.asarray(answer[words.text_scores], np.float32).reshape(-1)
            if len(out[TEXT_SCORES]) != count:
                raise ValueError(f"{len(out[TEXT_SCORES])} word scores in {words.text_scores} for {count} boxes")
        for arrays, shapes in WORD_TAPS.values():
            if arrays in answer and shapes in answer:
                out[arrays], out[shapes] = np.asarray(answer[arrays]), np.asarray(answer[shapes], np.int32)
        return out

    # -- the words on each side -------------------------------------------------------------------
    def read_words(self, image: np.ndarray, quads: np.ndarray, p) -> dict:
        """Each box's word as the reference reads it with ``p`` (a ``Recognition``): the texts, their
        scores and the word stages, packed as the ocr models answer them."""
        from harness.ocr.recognition import crop_box, to_input

        decoder = self.decoder(p)
        words = {"crop": [], "input": [], "output": []}
        texts, scores = [], []
        for quad in quads:
            crop = crop_box(image, quad, p)
            x = to_input(crop, p, "RGB")
            probabilities = self.recognizer(x)
            text, score = decoder(probabilities)
            texts.append(text)
            scores.append(score)
            for stage, array in (("crop", crop), ("input", x), ("output", probabilities)):
                words[stage].append(array)
        out = {TEXTS: np.array(texts, dtype=str), TEXT_SCORES: np.array(scores, np.float32)}
        least = {"crop": (0, 0, 3), "input": (3, p.height, 0), "output": (0, decoder.classes)}
        for stage, (arrays, shapes) in WORD_TAPS.items():
            out[arrays], out[shapes] = pack_ragged(words[stage], least[stage], np.uint8 if stage == "crop" else np.float32)
        return out

    def derive_reference(self, stages: dict) -> dict:
        out = super().derive_reference(stages)
        out[Stage.POSTPROCESS] = self.boxes_read(out[Stage.POSTPROCESS])
        quads = Detections.from_array(out[Stage.POSTPROCESS]).quads
        return {**out, **self.read_words(np.asarray(stages[Stage.DECODE]), quads, self._recognition().reference)}

    def boxes_read(self, boxes: np.ndarray) -> np.ndarray:
        """The boxes (a ``postprocess`` stage) whose words the deployment reads: at most its spec's
        ``max_words`` (:func:`harness.ocr.recognition.words_read`), as the ocr models keep them."""
        from harness.ocr.recognition import words_read

        array = np.asarray(boxes)
        return array[words_read(Detections.from_array(array).scores, self._recognition().deployed)]

    def derive_deployed(self, deployed: dict, reference: dict) -> dict:
        """The boxes (as the detection task derives them), then each deployed word's steps redone by
        the reference on the deployment's previous stage (``WORD_STEPS``), where the deployment
        answers its word stages and the decoded image is known."""
        out = super().derive_deployed(deployed, reference)
        both = {**deployed, **out}
        if TEXTS not in both and Stage.POSTPROCESS in both:
            raise ValueError("the deployment answers no texts (a BYTES output of one text per box beside its boxes)")
        image = both.get(Stage.DECODE, reference.get(Stage.DECODE))
        if image is not None and all(name in both for pair in WORD_TAPS.values() for name in pair):
            out[WORD_STEPS] = self.redo_steps(np.asarray(image), both)
        return out

    def redo_steps(self, image: np.ndarray, deployed: dict, p=None, stages: tuple[str, ...] = WORD_STAGES) -> np.ndarray:
        """[words, 4, 2]: per deployed word and word stage, (the verdict's rank, the error) of the
        reference's step (``p``: its ``[recognition]``, by default the spec's) on the deployment's
        previous stage against the deployment's; a stage not in ``stages`` is left equal."""
        from harness.ocr.recognition import crop_box, to_input

        s = self._recognition()
        p = p or s.reference
        decoder = self.decoder(p)
        quads = Detections.from_array(deployed[Stage.POSTPROCESS]).quads
        crops, inputs, outputs = (unpack_ragged(deployed[a], deployed[b]) for a, b in WORD_TAPS.values())
        texts = [str(t) for t in deployed[TEXTS]]
        if not (len(quads) == len(crops) == len(inputs) == len(outputs) == len(texts)):
            raise ValueError(f"the deployment answers {len(quads)} boxes but {len(crops)} crops, {len(inputs)} inputs, "
                             f"{len(outputs)} outputs and {len(texts)} texts")
        steps = np.zeros((len(quads), len(WORD_STAGES), 2), np.float64)
        for i, quad in enumerate(quads):
            expected = {"crop": lambda: crop_box(image, quad, p), "input": lambda: to_input(crops[i], p, "RGB"),
                        "output": lambda: self.recognizer(inputs[i]), "text": lambda: decoder(outputs[i])[0]}
            got = {"crop": crops[i], "input": inputs[i], "output": outputs[i], "text": texts[i]}
            for k, stage in enumerate(WORD_STAGES):
                if stage not in stages:
                    continue
                try:
                    verdict, error = step_verdict(stage, expected[stage](), got[stage], s.rules)
                except (ValueError, IndexError, RuntimeError):  # the deployment's stage cannot go into the step
                    verdict, error = Verdict.DIVERGED, np.inf
                steps[i, k] = verdict.rank, error
        return steps

    # -- comparison -------------------------------------------------------------------------------
    def result_of(self, reference, deployed, isolated, margin, top_k, scores=DETECTION):
        boxes = super().result_of(reference, deployed, isolated, margin, top_k, scores)
        if boxes is None or TEXTS not in reference or TEXTS not in deployed:
            return boxes
        pairs = self.pair_words(reference, deployed)
        word_metrics = self.word_metrics(pairs)
        worst = Verdict.worst([boxes.verdict, *(pair.verdict for pair in pairs)])
        return StageResult(Stage.POSTPROCESS, worst, {**boxes.metrics, **word_metrics}, boxes.isolated_verdict,
                           boxes.isolated)

    def pair_words(self, reference: dict, deployed: dict) -> list[WordPair]:
        """The words of the boxes matched one to one (IoU above 0.5, the reference's best score first)."""
        ref = Detections.from_array(as_deployed_codes(reference[Stage.POSTPROCESS], deployed))
        dep = Detections.from_array(deployed[Stage.POSTPROCESS])
        iou = iou_matrix(np.nan_to_num(ref.quads), np.nan_to_num(dep.quads))
        rules = self.recognition.rules if self.recognition else WordRules()
        ref_outputs = (unpack_ragged(reference[WORD_TAPS["output"][0]], reference[WORD_TAPS["output"][1]])
                       if WORD_TAPS["output"][0] in reference else None)
        steps = deployed.get(WORD_STEPS)
        ref_scores, dep_scores = reference.get(TEXT_SCORES), deployed.get(TEXT_SCORES)
        out = []
        for r, d in greedy_match(iou, ref.scores, MATCH_IOU):
            ref_text, dep_text = str(reference[TEXTS][r]), str(deployed[TEXTS][d])
            word_steps = {} if steps is None else {
                stage: (Verdict(("equal", "close", "tie", "diverged")[int(steps[d, k, 0])]), float(steps[d, k, 1]))
                for k, stage in enumerate(WORD_STAGES)}
            near = False
            if ref_text != dep_text and ref_outputs is not None and self.recognition is not None:
                decoded_alike = "text" not in word_steps or word_steps["text"][0] is not Verdict.DIVERGED
                near = decoded_alike and self.near_tie(ref_outputs[r], dep_text, rules.text_margin)
            delta = (float(dep_scores[d]) - float(ref_scores[r])) if ref_scores is not None and dep_scores is not None \
                else 0.0
            out.append(WordPair(r, d, ref_text, dep_text, delta, word_steps, near))
        return out

    def near_tie(self, probabilities: np.ndarray, deployed_text: str, margin: float) -> bool:
        """Whether the reference's output decodes to ``deployed_text`` once its steps whose two best
        classes lie within ``margin`` take their second best (one such step, or all of them)."""
        probabilities = np.asarray(probabilities, np.float32)
        order = np.argsort(probabilities, axis=-1)
        best, second = order[:, -1], order[:, -2]
        top2 = np.take_along_axis(probabilities, order[:, -2:], axis=-1)
        near = np.flatnonzero(top2[:, 1] - top2[:, 0] <= margin)
        if not len(near) or len(near) > 64:  # nothing near, or noise everywhere: no tie to speak of
            return False
        decoder = self.decoder(self._recognition().reference)

        def text_of(classes: np.ndarray) -> str:
            keep = np.ones(len(classes), bool)
            keep[1:] = classes[1:] != classes[:-1]
            return "".join(decoder.char(int(c)) for c in classes[keep & (classes != decoder.blank_index)])

        for flipped in [[k] for k in near] + [list(near)]:
            classes = best.copy()
            classes[flipped] = second[flipped]
            if text_of(classes) == deployed_text:
                return True
        return False

    @staticmethod
    def word_metrics(pairs: list[WordPair]) -> dict:
        exact = sum(p.reference_text == p.deployed_text for p in pairs)
        chars = sum(len(p.reference_text) for p in pairs)
        errors = sum(edit_distance(p.reference_text, p.deployed_text) for p in pairs)
        changed = [p for p in pairs if p.verdict in (Verdict.TIE, Verdict.DIVERGED)]
        culprits = [p.culprit for p in pairs if p.culprit]
        step_worst = {stage: max((p.steps[stage][1] for p in pairs if stage in p.steps), default=None)
                      for stage in WORD_STAGES}
        return {"words_matched": len(pairs), "words_exact": exact, "word_ties": sum(p.verdict is Verdict.TIE for p in pairs),
                "reference_chars": chars, "char_errors": errors, "cer": round(errors / chars, 5) if chars else 0.0,
                "max_text_score_delta": max((abs(p.score_delta) for p in pairs), default=None),
                "word_culprit": min(culprits, key=WORD_STAGES.index) if culprits else None,
                "word_step_worst": {k: (None if v is None or not np.isfinite(v) else v) for k, v in step_worst.items()},
                "word_changes": [p.to_dict() for p in changed[:MAX_LISTED]]}

    def events(self, margin):
        return OcrEvents(margin)

    # -- the effect on a labeled set: word accuracy, CER, end-to-end F1 (harness.ocr.effect) ----------------
    progress_word = "reading"

    def effect_of_results(self, dataset, results, changes):
        from harness.ocr.effect import evaluate_ocr

        found = [(path, {image: (Detections.from_array(stages[Stage.POSTPROCESS]), [str(t) for t in stages[TEXTS]])
                         for image, stages in images.items() if TEXTS in stages})
                 for path, images in results.items()]
        return evaluate_ocr(dataset.source, found, changes=changes)

    # -- diagnose -----------------------------------------------------------------------------------
    def diagnose_hypotheses(self):
        """The detector's culprits, and recognition's: each a change of ``[reference.recognition]``
        (its keys prefixed ``recognition.``)."""
        return [*super().diagnose_hypotheses(), *recognition_hypotheses(self._recognition().reference)]

    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        """The boxes as the detection task judges them under the setting, then the deployment's
        words redone under the setting's ``[recognition]`` (crop, input and decoding on the
        deployment's own previous stages; the model is the same in every setting): a word stage
        beyond its rule is the event."""
        from dataclasses import replace

        changes = dict((context or {}).get("postprocess") or {})
        words = {k.removeprefix(RECOGNITION): v for k, v in changes.items() if k.startswith(RECOGNITION)}
        boxes = {k: v for k, v in changes.items() if not k.startswith(RECOGNITION)}
        verdict, happened = super().diagnose_result(reference, deployed, gallery, index, margin,
                                                    {**(context or {}), "postprocess": boxes})
        dep = (context or {}).get("deployed") or {}
        if Stage.DECODE not in dep or TEXTS not in dep or not all(n in dep for pair in WORD_TAPS.values() for n in pair):
            return verdict, happened
        try:
            p = replace(self._recognition().reference, **words)
            steps = self.redo_steps(np.asarray(dep[Stage.DECODE]), dep, p, stages=("crop", "input", "text"))
        except Exception:  # noqa: BLE001 - a setting whose words cannot be made is as far as it gets
            return Verdict.DIVERGED, 1.0
        if (steps[:, :, 0] == Verdict.DIVERGED.rank).any():
            return Verdict.DIVERGED, 1.0
        return verdict, happened

    def csv_values(self, stage):
        values = super().csv_values(stage)
        return values if stage is not None else [""] * len(self.csv_fields)

    # -- reports --------------------------------------------------------------------------------
    def output_note(self, report):
        return (f"{super().output_note(report)} The words of the matched boxes are compared end to end (exact, "
                "character error rate) and step by step (crop, input, output, text: the reference's step on the "
                "deployment's previous stage).")

    def summary_line(self, report):
        line = super().summary_line(report)
        f = report.summary.figures
        if line is None or not f.get("words_matched"):
            return line
        culprits = ", ".join(f"{stage} {count}" for stage, count in sorted(
            (f.get("word_culprits") or {}).items(), key=lambda kv: WORD_STAGES.index(kv[0])))
        return (line + f" Words of the matched boxes: **{f['words_exact']} of {f['words_matched']} read alike**, "
                       f"character error rate {fmt(f['cer'])}"
                + (f"; words diverged first at: {culprits}" if culprits else "") + ".")

    def sections(self, report):
        out = super().sections(report)
        rows = tuple((e.image, c["verdict"], c["reference_text"], c["deployed_text"], fmt(c["cer"]),
                      fmt(c["score_delta"]), c["culprit"] or "-")
                     for e in report.summary.events for c in e.details.get("word_changes") or ())
        if rows:
            out.append(Section("Words that changed", "Words of matched boxes whose text or a word stage changed; "
                               "culprit: the first word stage (crop, input, output, text) where the reference's step "
                               "on the deployment's previous stage does not make the deployment's.",
                               ("image", "verdict", "reference", "deployed", "CER", "score change", "culprit"), rows,
                               verdict_column=1))
        return out


STRING_TYPES = ("TYPE_STRING", "BYTES")
TEXT_WORDS = ("text", "word", "txt", "rec", "transcri")
"""Names of an output holding texts (or, a float one, the texts' scores)."""
BOX_SCORE_WORDS = ("det", "dt_", "box")
"""Names of a float output holding the boxes' scores (beside an OCR model's texts)."""


@dataclass(frozen=True)
class WordOutputs:
    """An OCR deployment's outputs holding its words: the boxes (``BoxOutputs``: its scores None
    where the deployment answers only one score per word, the text's), the texts (BYTES, one per
    box) and the texts' scores (None: none answered)."""

    boxes: Any
    texts: str | None
    text_scores: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.boxes.names, *(n for n in (self.texts, self.text_scores) if n))

    def describe(self) -> str:
        scores = f", their scores {self.text_scores}" if self.text_scores else ""
        return f"{self.boxes.describe()}; texts {self.texts}{scores}"

    @property
    def unsettled(self) -> bool:
        return self.boxes.unsettled

    def settled(self, answer, size) -> "WordOutputs":
        """The boxes' coding told by a probe's answer (:meth:`BoxOutputs.settled`)."""
        from dataclasses import replace

        return replace(self, boxes=self.boxes.settled(answer, size))


def find_texts(model, choice: str | None = None):
    """(the output holding an OCR model's texts: BYTES, one entry per box, any name; or None, and
    why where several could be). ``choice`` (``--output``) names one; of several, the one named
    like texts, else none."""
    strings = [t for t in model.outputs if t.data_type in STRING_TYPES and len(t.dims) == 1]
    named = [t for t in strings if t.name == choice]
    if named:
        return named[0], ""
    if len(strings) > 1:
        texty = [t for t in strings if any(w in t.name.lower() for w in TEXT_WORDS)]
        if len(texty) == 1:
            return texty[0], ""
        return None, (f"model {model.name!r} answers {len(strings)} outputs that could hold its texts "
                      f"({', '.join(t.describe() for t in strings)}): name the texts with --output")
    return (strings[0] if strings else None), ""


def find_word_outputs(model, choice: str | None = None) -> WordOutputs | None:
    """An OCR model's :class:`WordOutputs`, or None where it answers no texts (or no boxes). The
    texts' scores: the float vector named like texts (``TEXT_SCORES``, ``rec_scores``); else, of
    the float vectors not named like the boxes' (``det``, ``box``), the one alone beside the boxes:
    an OCR model's one score per word is its text's confidence (rapidocr's ``scores``, EasyOCR's,
    docTR's); the boxes then have no scores of their own."""
    from harness.detection.outputs import CLASS_WORDS, COUNT_WORDS, FLOAT_TYPES, find_box_outputs

    texts, _ = find_texts(model, choice)
    if texts is None:
        return None
    vectors = [t for t in model.outputs if t.data_type in FLOAT_TYPES and len(t.dims) == 1]
    texty = [t for t in vectors if any(w in t.name.lower() for w in TEXT_WORDS)]
    rest = [t for t in vectors if t not in texty and not any(w in t.name.lower() for w in
                                                             (*BOX_SCORE_WORDS, *CLASS_WORDS, *COUNT_WORDS))]
    scores = texty[0] if len(texty) == 1 else (rest[0] if not texty and len(rest) == 1 else None)
    left = [t for t in model.outputs if t is not texts and t is not scores]
    boxes = find_box_outputs(left, scored=False)
    if boxes is None:
        return None
    return WordOutputs(boxes, texts.name, scores.name if scores else None)


RECOGNITION = "recognition."
"""The prefix of a diagnose hypothesis's ``[reference.recognition]`` keys (the others are ``[postprocess]``'s)."""
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
PADDLE = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
RECOGNITION_CANDIDATES = {
    # culprit -> the alternatives tried, each a set of [recognition] keys changed together
    "recognition height": ({"height": 32}, {"height": 48}),
    "recognition width cap and padding": ({"width": 160, "max_width": 160}, {"width": 320, "max_width": 320},
                                          {"width": 320, "max_width": 1280}, {"width": 320, "max_width": 2048},
                                          {"pad_value": -1.0}, {"pad_value": 0.0}),
    "recognition normalization": ({"mean": IMAGENET[0], "std": IMAGENET[1]}, {"mean": PADDLE[0], "std": PADDLE[1]}),
    "recognition channel order": ({"channel_order": "RGB"}, {"channel_order": "BGR"}),
    "axis-aligned crop vs perspective warp": ({"crop": "axis_aligned"}, {"crop": "perspective"}),
    "rotation rule": ({"rotate_ratio": 0.0}, {"rotate_ratio": 1.5}),
    "dictionary blank offset": ({"blank_index": 0}, {"blank_index": 18709}),
}
"""Recognition's culprits (issue 39): the values PaddleOCR's configs and ports use."""


def recognition_hypotheses(reference) -> list:
    """Every candidate change of the reference's ``[recognition]`` that differs from it."""
    from harness.task.base import ResultCulprit

    out = []
    for culprit, candidates in RECOGNITION_CANDIDATES.items():
        for change in candidates:
            before = {k: getattr(reference, k) for k in change}
            if all(tuple(v) == tuple(before[k]) if isinstance(v, tuple) else v == before[k] for k, v in change.items()):
                continue
            name = ", ".join(f"{k.replace('_', ' ')} {list(v) if isinstance(v, tuple) else v}" for k, v in change.items())
            out.append(ResultCulprit(f"recognition {name}", culprit,
                                     tuple((RECOGNITION + k, before[k], v) for k, v in change.items())))
    return out


__all__ = ["Ocr", "character_error_rate", "recognition_hypotheses"]
