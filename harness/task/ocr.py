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

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from harness.client import TaskModels
from harness.detection.boxes import Detections, greedy_match, iou_matrix
from harness.errors import UsageError
from harness.formatting import fmt
from harness.ocr.compare import (
    CAUSES,
    WORD_STAGES,
    WordPair,
    WordRules,
    character_error_rate,
    edit_distance,
    needed_leads,
    step_verdict,
)
from harness.ocr.recognition import CtcDecoder, batch_ratios, parameters, to_input, to_inputs, words_read
from harness.ocr.tensors import TEXT_SCORES, TEXTS, WORD_TAPS, WORDS_KEPT, decode_texts, pack_ragged, unpack_ragged
from harness.operations import channels, word_crop
from harness.result import StageResult
from harness.scores import DETECTION
from harness.spec import SpecError
from harness.stage import GEOMETRY_TENSOR, Stage
from harness.task.detection import Detection, DetectionEvents, DetectionSetup, as_deployed_codes
from harness.task_api import Event, OutputChoice, ResultCulprit, Section
from harness.task_api.models import ONNX_ON_CPU, CpuReplacement, ShippedModel
from harness.verdict import Verdict

WORD_STEPS = "WORD_STEPS"
"""The deployed side's key of the step-by-step comparison: [words, word stages, (verdict rank, error)]."""
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
        self.words = dict.fromkeys(("words_matched", "words_exact", "word_ties", "words_dropped", "reference_chars",
                                    "char_errors"), 0)
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


def install_recognizer(folder: Path, spec, config) -> Path:
    """rapidocr's PP-OCRv6 recognizer into ``folder`` with its licence notice and dictionary."""
    from harness.ocr.recognizer import install_model  # here: loads OpenCV and pyclipper only when exporting

    return install_model(folder)


class Ocr(Detection):
    """The OCR task; :meth:`configure` binds it to a spec's postprocessing and ``[recognition]``."""

    name = "ocr"
    # The detection task's models and the recognizer behind them (docs/ocr.md): the raw output is
    # the detector's map, the boxes and words come from ocr_<pipeline> (Python-backend BLS).
    repository = TaskModels("ocr", "detector", "x", "fetch_name_0", "PROBABILITY", spec="ocr.toml",
                            preprocess_prefix="detect_", results=("BOXES", "SCORES"),
                            postprocess_model="detect_postprocess",
                            added=(*Detection.repository.added, "recognizer", "ocr_decode_dali", "ocr_preprocess_dali",
                                   "ocr_dali", "ocr_opencv", "ocr_dali_taps", "ocr_opencv_taps"),
                            engines=("detector", "recognizer"), answer_suffix="_taps",
                            # the recognizer's ONNX in ONNX Runtime, as the detector's; its DALI
                            # preprocessing with the CPU decoder
                            shipped=(*Detection.repository.shipped,
                                     ShippedModel("recognizer", ONNX_ON_CPU, install_recognizer,
                                                  "installed PP-OCRv6's text recognizer (the OCR task's model) as {path}, "
                                                  "with its licence notice and its dictionary (dictionary.txt)"),
                                     # the page ocr_dali cuts its words from: one instance, as the
                                     # detector's taps model it replaces (issue 58)
                                     ShippedModel("ocr_decode_dali", CpuReplacement(
                                         "harness.serving.preprocess_dali_cpu", {"num_threads": "1"})),
                                     ShippedModel("ocr_preprocess_dali", CpuReplacement(
                                         "harness.serving.ocr_preprocess_dali_cpu", {"num_threads": "1"}))))
    noun = "words"
    result_words = "the boxes and words"
    output_words = "the detector's raw output (a probability map)"
    event_words = ("word or box change", "word or box changes")
    flip_words = "images with word or box changes"
    agreement_words = "word agreement"
    tie_words = ("change is a near tie", "changes are near ties")
    csv_fields = (*Detection.csv_fields, "words_matched", "words_exact", "cer", "word_culprit")
    answer_extras = (GEOMETRY_TENSOR, TEXTS, TEXT_SCORES, WORDS_KEPT,
                     *(name for pair in WORD_TAPS.values() for name in pair))

    def __init__(self, setup: DetectionSetup | None = None, recognition: RecognitionSetup | None = None):
        super().__init__(setup)
        self.recognition = recognition

    # -- set-up -------------------------------------------------------------------------------
    def configure(self, spec, postprocess: str | None = None) -> "Ocr":
        detection = Detection.configure(self, spec, postprocess)
        if spec.recognition is None:
            raise UsageError(f"--task ocr: the spec ({spec.source}) has no [recognition] table: nothing says how the "
                             "words of the boxes are read (model_repository/ocr.toml has the repository's)")
        try:  # (the spec checked the tables when it was read after this module: now, if before)
            setup = RecognitionSetup(parameters(spec.reference.recognition), parameters(spec.recognition))
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{spec.source}: {exc}") from None
        return Ocr(detection.setup, setup)

    def _recognition(self) -> RecognitionSetup:
        if self.recognition is None:
            raise RuntimeError("the ocr task was not configured with a spec (Task.configure)")
        return self.recognition

    @cached_property
    def recognizer(self):
        from harness.ocr.recognizer import TextRecognizer

        return TextRecognizer()

    def decoder(self, p):
        return CtcDecoder(self.recognizer.characters, p.blank_index)

    # -- discovery ------------------------------------------------------------------------------
    @staticmethod
    def _without_taps(model):
        """``model`` without this repository's word stage taps (``WORD_*``, ``WORDS_KEPT``: read by name)."""
        taps = {WORDS_KEPT, *(name for pair in WORD_TAPS.values() for name in pair)}
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
        if WORDS_KEPT in answer:
            out[WORDS_KEPT] = np.asarray(answer[WORDS_KEPT], bool).reshape(-1)
            if len(out[WORDS_KEPT]) != count:
                raise ValueError(f"{len(out[WORDS_KEPT])} kept flags in {WORDS_KEPT} for {count} boxes")
        for arrays, shapes in WORD_TAPS.values():
            if arrays in answer and shapes in answer:
                out[arrays], out[shapes] = np.asarray(answer[arrays]), np.asarray(answer[shapes], np.int32)
        return out

    # -- the words on each side -------------------------------------------------------------------
    def read_words(self, image: np.ndarray, quads: np.ndarray, p) -> dict:
        """Each box's word as the reference reads it with ``p`` (a ``Recognition``): the texts, their
        scores, which are kept (``p.text_score``) and the word stages, packed as the ocr models
        answer them when asked for every word."""
        decoder = self.decoder(p)
        words = {"crop": [], "input": [], "output": []}
        texts, scores = [], []
        crops = [word_crop.crop_box(image, quad, p) for quad in quads]
        for crop, x in zip(crops, to_inputs(crops, p, "RGB")):  # each padded to the widest of its batch
            probabilities = self.recognizer(x)
            text, score = decoder(probabilities)
            texts.append(text)
            scores.append(score)
            for stage, array in (("crop", crop), ("input", x), ("output", probabilities)):
                words[stage].append(array)
        out = {TEXTS: np.array(texts, dtype=str), TEXT_SCORES: np.array(scores, np.float32),
               WORDS_KEPT: np.array([p.keeps(score) for score in scores], bool)}
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
        """[words, stages, 2]: per deployed word and word stage, (the verdict's rank, the error) of
        the reference's step (``p``: its ``[recognition]``, by default the spec's) on the
        deployment's previous stage against the deployment's; a stage not in ``stages``, and the
        text score filter where the deployment answers only the words it keeps, is left equal."""
        s = self._recognition()
        p = p or s.reference
        decoder = self.decoder(p)
        quads = Detections.from_array(deployed[Stage.POSTPROCESS]).quads
        crops, inputs, outputs = (unpack_ragged(deployed[a], deployed[b]) for a, b in WORD_TAPS.values())
        texts = [str(t) for t in deployed[TEXTS]]
        scores, kept = deployed.get(TEXT_SCORES), deployed.get(WORDS_KEPT)
        if not (len(quads) == len(crops) == len(inputs) == len(outputs) == len(texts)):
            raise ValueError(f"the deployment answers {len(quads)} boxes but {len(crops)} crops, {len(inputs)} inputs, "
                             f"{len(outputs)} outputs and {len(texts)} texts")
        steps = np.zeros((len(quads), len(WORD_STAGES), 2), np.float64)
        widest = batch_ratios([crop.shape[:2] for crop in crops], p)  # the deployment's crops make its batches
        for i, quad in enumerate(quads):
            expected = {"crop": lambda: word_crop.crop_box(image, quad, p),
                        "input": lambda: to_input(crops[i], p, "RGB", widest[i]),
                        "output": lambda: self.recognizer(inputs[i]), "text": lambda: decoder(outputs[i])[0],
                        "kept": lambda: p.keeps(float(scores[i]))}
            got = {"crop": crops[i], "input": inputs[i], "output": outputs[i], "text": texts[i],
                   "kept": None if kept is None else bool(kept[i])}
            for k, stage in enumerate(WORD_STAGES):
                if stage not in stages or (stage == "kept" and (kept is None or scores is None)):
                    continue
                try:
                    verdict, error = step_verdict(stage, expected[stage](), got[stage], s.rules)
                except (ValueError, IndexError, RuntimeError):  # the deployment's stage cannot go into the step
                    verdict, error = Verdict.DIVERGED, np.inf
                steps[i, k] = verdict.rank, error
        return steps

    # -- comparison -------------------------------------------------------------------------------
    def result_of(self, reference, deployed, isolated, margin, top_k, scores=DETECTION):
        if TEXTS in reference and TEXTS in deployed and WORDS_KEPT not in deployed and WORDS_KEPT in reference:
            # The deployment answers the words it keeps only: the reference's as its users get them.
            reference, isolated = self.kept_only(reference, isolated)
        boxes = super().result_of(reference, deployed, isolated, margin, top_k, scores)
        if boxes is None or TEXTS not in reference or TEXTS not in deployed:
            return boxes
        pairs = self.pair_words(reference, deployed)
        word_metrics = self.word_metrics(pairs, self.recognition.rules if self.recognition else WordRules())
        worst = Verdict.worst([boxes.verdict, *(pair.verdict for pair in pairs)])
        return StageResult(Stage.POSTPROCESS, worst, {**boxes.metrics, **word_metrics}, boxes.isolated_verdict,
                           boxes.isolated)

    @staticmethod
    def kept_only(reference: dict, isolated: dict) -> tuple[dict, dict]:
        """The reference without the words it drops (boxes, texts, scores, word stages), and the
        isolated run's boxes without those of the same dropped words (the same map's boxes)."""
        kept = np.asarray(reference[WORDS_KEPT], bool)
        if kept.all():
            return reference, isolated
        out = dict(reference)
        out[Stage.POSTPROCESS] = np.asarray(reference[Stage.POSTPROCESS])[kept]
        for name in (TEXTS, TEXT_SCORES, WORDS_KEPT):
            out[name] = np.asarray(reference[name])[kept]
        for arrays, shapes in WORD_TAPS.values():
            if arrays in reference:
                out[arrays], out[shapes] = np.asarray(reference[arrays])[kept], np.asarray(reference[shapes])[kept]
        if Stage.POSTPROCESS not in isolated:
            return out, isolated
        alone = Detections.from_array(isolated[Stage.POSTPROCESS])
        dropped = Detections.from_array(reference[Stage.POSTPROCESS]).quads[~kept]
        iou = iou_matrix(np.nan_to_num(dropped), np.nan_to_num(alone.quads))
        gone = {d for _, d in greedy_match(iou, np.ones(len(dropped)), MATCH_IOU)}
        keep = np.array([i not in gone for i in range(len(alone))], bool)
        return out, {**isolated, Stage.POSTPROCESS: np.asarray(isolated[Stage.POSTPROCESS])[keep]}

    def pair_words(self, reference: dict, deployed: dict) -> list[WordPair]:
        """The words of the boxes matched one to one (IoU above 0.5, the reference's best score
        first), each with its steps, whether each side keeps it, the reference's leads where the
        deployed output changed a step's best class, and, for a changed answer, the stage that made
        it and whether it is a tie (:mod:`harness.ocr.compare`)."""
        ref = Detections.from_array(as_deployed_codes(reference[Stage.POSTPROCESS], deployed))
        dep = Detections.from_array(deployed[Stage.POSTPROCESS])
        iou = iou_matrix(np.nan_to_num(ref.quads), np.nan_to_num(dep.quads))
        rules = self.recognition.rules if self.recognition else WordRules()
        ref_outputs, dep_outputs = (unpack_ragged(side[WORD_TAPS["output"][0]], side[WORD_TAPS["output"][1]])
                                    if WORD_TAPS["output"][0] in side else None for side in (reference, deployed))
        steps = deployed.get(WORD_STEPS)
        ref_scores, dep_scores = reference.get(TEXT_SCORES), deployed.get(TEXT_SCORES)
        ref_kept, dep_kept = reference.get(WORDS_KEPT), deployed.get(WORDS_KEPT)
        explained = self.binarization_evidence(reference, deployed)
        out = []
        for r, d in greedy_match(iou, ref.scores, MATCH_IOU):
            ref_text, dep_text = str(reference[TEXTS][r]), str(deployed[TEXTS][d])
            word_steps = {} if steps is None else {
                stage: (Verdict(("equal", "close", "tie", "diverged")[int(steps[d, k, 0])]), float(steps[d, k, 1]))
                for k, stage in enumerate(WORD_STAGES[:steps.shape[1]])}
            delta = (float(dep_scores[d]) - float(ref_scores[r])) if ref_scores is not None and dep_scores is not None \
                else 0.0
            pair = WordPair(r, d, ref_text, dep_text, delta, word_steps, False,
                            bool(ref_kept[r]) if ref_kept is not None else True,
                            bool(dep_kept[d]) if dep_kept is not None else True,
                            needed_leads(ref_outputs[r], dep_outputs[d], self.decoder(self._recognition().reference).text)
                            if ref_outputs and dep_outputs and ref_text != dep_text else None,
                            reference_score=None if ref_scores is None else float(ref_scores[r]),
                            box_move=self.box_move(ref, dep, r, d, float(iou[r, d]), explained))
            if pair.changed and pair.step_culprit is None:
                pair = replace(pair, made_by=self.word_made_by(reference, deployed, r, d, ref_text, dep_text,
                                                               pair.deployed_kept))
                pair = replace(pair, near_tie=self.is_tie(pair, ref_outputs[r] if ref_outputs else None, rules))
            out.append(pair)
        return out

    def is_tie(self, pair: WordPair, reference_output: np.ndarray | None, rules: WordRules) -> bool:
        """Whether a changed answer, every step within its rule, is explained by what came before it
        (:mod:`harness.ocr.compare`): made by a box that moved within the detection rule; else where
        the reference was unsure: each step a text change needed led by at most ``text_margin`` (by
        the reference's output alone, its near steps flipped, where the deployment shows no output),
        and a word kept on one side only scored within ``score_margin`` of the threshold on both or
        changed its text within that margin (a word read otherwise scores otherwise)."""
        if pair.made_by == "box":  # a box the detection rule holds (close, or moved near the threshold)
            return pair.box_move is not None and pair.box_move[2]
        if pair.reference_text == pair.deployed_text:
            text_explained = True
        elif pair.leads is not None:
            text_explained = all(lead <= rules.text_margin for _, lead in pair.leads)
        else:
            text_explained = reference_output is not None and self.near_tie(reference_output, pair.deployed_text,
                                                                             rules.text_margin)
        if pair.reference_kept == pair.deployed_kept:
            return text_explained
        threshold = self._recognition().reference.text_score
        scores = (pair.reference_score, None if pair.reference_score is None else pair.reference_score + pair.score_delta)
        near = all(score is not None and abs(score - threshold) <= rules.score_margin for score in scores)
        return near or (pair.reference_text != pair.deployed_text and text_explained)

    def box_move(self, ref: Detections, dep: Detections, r: int, d: int, iou: float,
                 explained=None) -> tuple[float, float, bool, bool]:
        """(the worst corner's move, the IoU, whether the detection task's rule holds the match, and
        whether it holds it as a move near the binarization threshold) of a matched pair of boxes,
        judged as the boxes' comparison judges it (:func:`harness.detection.compare.judge_match`,
        ``explained`` the maps' evidence: :meth:`binarization_evidence`)."""
        from harness.detection.compare import DetectionTolerance, judge_match

        t = self.setup.tolerance if self.setup else DetectionTolerance()
        match = judge_match(ref, dep, r, d, iou, t, explained)
        # NaN where a side's boxes are unscored: no score to judge
        return match.corner_px, iou, not match.beyond(t, scored=bool(np.isfinite(match.score_delta))), \
            match.near_threshold

    def word_made_by(self, reference: dict, deployed: dict, r: int, d: int, ref_text: str, dep_text: str,
                     dep_kept: bool) -> str | None:
        """The first of :data:`~harness.ocr.compare.CAUSES` whose deployed value, taken through the
        reference's remaining steps, gives the deployment's answer (its text, and whether it is kept):
        the box (the reference's crop of the deployed box in its own image), the crop, the input, the
        output (decoded), else the decoding or the filter itself; None where the deployment shows no
        word stage."""
        names = [name for pair in WORD_TAPS.values() for name in pair]
        if not all(name in deployed for name in names):
            return None
        p = self._recognition().reference
        decoder = self.decoder(p)
        every_crop, every_input, every_output = (unpack_ragged(deployed[a], deployed[b]) for a, b in WORD_TAPS.values())
        crops, inputs, outputs = every_crop[d], every_input[d], every_output[d]
        batch_widest = batch_ratios([crop.shape[:2] for crop in every_crop], p)[d]
        wanted = (dep_text, dep_kept)

        def padded(crop) -> np.ndarray:
            """A crop put in this word's place: padded to its batch's widest, or to its own width if wider."""
            return to_input(crop, p, "RGB", max(batch_widest, crop.shape[1] / float(crop.shape[0])))

        def answer(probabilities) -> tuple[str, bool]:
            text, score = decoder(probabilities)
            return text, p.keeps(score)

        ref_quad, dep_quad = (Detections.from_array(side[Stage.POSTPROCESS]).quads[i]
                              for side, i in ((reference, r), (deployed, d)))
        image = reference.get(Stage.DECODE)
        tries = {"box": (lambda: answer(self.recognizer(padded(word_crop.crop_box(np.asarray(image), dep_quad, p)))))
                 if image is not None and not np.array_equal(ref_quad, dep_quad) else None,
                 "crop": lambda: answer(self.recognizer(padded(crops))),
                 "input": lambda: answer(self.recognizer(inputs)),
                 "output": lambda: answer(outputs)}
        for cause, attempt in tries.items():
            try:
                if attempt is not None and attempt() == wanted:
                    return cause
            except (ValueError, IndexError, RuntimeError):  # a deployed stage the reference's step cannot take
                continue
        return "text" if decoder(outputs)[0] != dep_text else "kept"

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
        text = self.decoder(self._recognition().reference).text
        for flipped in [[k] for k in near] + [list(near)]:
            classes = best.copy()
            classes[flipped] = second[flipped]
            if text(classes) == deployed_text:
                return True
        return False

    @staticmethod
    def word_metrics(pairs: list[WordPair], rules: WordRules = WordRules()) -> dict:
        """The words answered (kept on either side) and how they changed: each side's text as its
        users get it ('' for a word it drops)."""
        answered = [p for p in pairs if p.answered]
        visible = [p.visible_texts for p in answered]
        exact = sum(a == b for a, b in visible)
        chars = sum(len(a) for a, _ in visible)
        errors = sum(edit_distance(a, b) for a, b in visible)
        changed = [p for p in pairs if p.verdict in (Verdict.TIE, Verdict.DIVERGED)]
        culprits = [p.culprit for p in pairs if p.culprit]
        step_worst = {stage: max((p.steps[stage][1] for p in pairs if stage in p.steps), default=None)
                      for stage in WORD_STAGES}
        return {"words_matched": len(answered), "words_exact": exact,
                "word_ties": sum(p.verdict is Verdict.TIE for p in pairs),
                "words_dropped": sum(not p.answered for p in pairs),
                "reference_chars": chars, "char_errors": errors, "cer": round(errors / chars, 5) if chars else 0.0,
                "max_text_score_delta": max((abs(p.score_delta) for p in answered), default=None),
                "word_culprit": min(culprits, key=_cause_order) if culprits else None,
                "word_step_worst": {k: (None if v is None or not np.isfinite(v) else v) for k, v in step_worst.items()},
                "word_changes": [p.to_dict(rules) for p in changed[:MAX_LISTED]]}

    def events(self, margin):
        return OcrEvents(margin)

    # -- the effect on a labeled set: word accuracy, CER, end-to-end F1 (harness.ocr.effect) ----------------
    progress_word = "reading"

    def effect_of_results(self, dataset, results, changes):
        from harness.ocr.effect import evaluate_ocr

        found = [(path, {image: kept_words(stages) for image, stages in images.items() if TEXTS in stages})
                 for path, images in results.items()]
        return evaluate_ocr(dataset.source, found, changes=changes)

    # -- diagnose -----------------------------------------------------------------------------------
    def diagnose_hypotheses(self):
        """The detector's culprits, and recognition's: each a change of ``[reference.recognition]``
        (its keys prefixed ``recognition.``)."""
        return [*super().diagnose_hypotheses(), *recognition_hypotheses(self._recognition().reference)]

    def diagnose_result(self, reference, deployed, gallery, index, margin, context=None):
        """The boxes as the detection task judges them under the setting, then the deployment's
        words as check compares them: each word stage redone under the setting's
        ``[recognition]`` (crop, input and decoding on the deployment's own previous stages, the
        crops cut from the deployment's decoded image or else the setting's, as check cuts
        them), and the recognizer's own step as check found it (the model is the same in every
        setting); a word stage beyond its rule is the event. A deployment answering no word
        stages has its texts compared with the setting's reading of its boxes."""
        from dataclasses import replace

        context = context or {}
        changes = dict(context.get("postprocess") or {})
        words = {k.removeprefix(RECOGNITION): v for k, v in changes.items() if k.startswith(RECOGNITION)}
        boxes = {k: v for k, v in changes.items() if not k.startswith(RECOGNITION)}
        verdict, happened = super().diagnose_result(reference, deployed, gallery, index, margin,
                                                    {**context, "postprocess": boxes})
        dep = context.get("deployed") or {}
        image = dep.get(Stage.DECODE, context.get("decoded"))
        if image is None or TEXTS not in dep or Stage.POSTPROCESS not in dep:
            return verdict, happened
        try:
            p = replace(self._recognition().reference, **words)
            if all(n in dep for pair in WORD_TAPS.values() for n in pair):
                steps = self.redo_steps(np.asarray(image), dep, p, stages=("crop", "input", "text"))
                if WORD_STEPS in dep and len(dep[WORD_STEPS]) == len(steps):
                    output = WORD_STAGES.index("output")
                    steps[:, output] = dep[WORD_STEPS][:, output]
                diverged = (steps[:, :, 0] == Verdict.DIVERGED.rank).any()
            else:
                quads = Detections.from_array(dep[Stage.POSTPROCESS]).quads
                mine = self.read_words(np.asarray(image), quads, p)[TEXTS]
                diverged = [str(t) for t in mine] != [str(t) for t in dep[TEXTS]]
        except Exception:  # noqa: BLE001 - a setting whose words cannot be made is as far as it gets
            return Verdict.DIVERGED, 1.0
        return (Verdict.DIVERGED, 1.0) if diverged else (verdict, happened)

    def csv_values(self, stage):
        values = super().csv_values(stage)
        return values if stage is not None else [""] * len(self.csv_fields)

    # -- reports --------------------------------------------------------------------------------
    def output_note(self, report):
        return (f"{super().output_note(report)} The words of the matched boxes are compared end to end (exact, "
                "character error rate, whether each side keeps it) and step by step (crop, input, output, text, kept: "
                "the reference's step on the deployment's previous stage).")

    def summary_line(self, report):
        line = super().summary_line(report)
        f = report.summary.figures
        if line is None or not f.get("words_matched"):
            return line
        culprits = ", ".join(f"{stage} {count}" for stage, count in sorted(
            (f.get("word_culprits") or {}).items(), key=lambda kv: _cause_order(kv[0])))
        return (line + f" Words of the matched boxes: **{f['words_exact']} of {f['words_matched']} read alike**, "
                       f"character error rate {fmt(f['cer'])}"
                + (f"; words diverged first at: {culprits}" if culprits else "") + ".")

    def sections(self, report):
        out = super().sections(report)

        def shown(text: str, kept) -> str:
            return text if kept in (None, True) else f"{text} (dropped)"

        rows = tuple((e.image, c["verdict"], shown(c["reference_text"], c.get("reference_kept")),
                      shown(c["deployed_text"], c.get("deployed_kept")), fmt(c["cer"]), fmt(c["score_delta"]),
                      c["culprit"] or "-", c.get("evidence") or "")
                     for e in report.summary.events for c in e.details.get("word_changes") or ())
        if rows:
            out.append(Section("Words that changed", "Words of matched boxes whose answer (the text, or whether the "
                               "word is kept: its score at least the text score threshold) or a word stage changed. "
                               "culprit: the first word stage (crop, input, output, text, kept) where the reference's "
                               "step on the deployment's previous stage does not make the deployment's; else, for a "
                               "change that is no tie, the stage that made it (box, crop, input, output). A tie: "
                               "every step within its rule, and a change made by a box that moved within the "
                               "detection rule, or where the reference was unsure (its lead at each step the change "
                               "needed within the tie margin, its score near the threshold).",
                               ("image", "verdict", "reference", "deployed", "CER", "score change", "culprit",
                                "evidence"), rows, verdict_column=1))
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


def kept_words(stages: dict) -> tuple[Detections, list[str]]:
    """One side's boxes and texts as its users get them: without the words it drops (``WORDS_KEPT``)."""
    boxes, texts = Detections.from_array(stages[Stage.POSTPROCESS]), [str(t) for t in stages[TEXTS]]
    if WORDS_KEPT not in stages:
        return boxes, texts
    kept = np.asarray(stages[WORDS_KEPT], bool)
    return (Detections.from_array(np.asarray(stages[Stage.POSTPROCESS])[kept]),
            [t for t, k in zip(texts, kept) if k])


def _cause_order(cause: str) -> int:
    """Pipeline order of a word's culprit (:data:`~harness.ocr.compare.CAUSES`; ``unknown`` last)."""
    return CAUSES.index(cause) if cause in CAUSES else len(CAUSES)


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
    # rapidocr's and PaddleOCR's rec_batch_num (6): each word padded to the widest of its batch; 1: alone
    "recognition batch padding": ({"batch": 6}, {"batch": 1}),
    "recognition channel order": tuple(channels.table(order) for order in channels.ORDERS),
    **word_crop.CANDIDATES,
    "dictionary blank offset": ({"blank_index": 0}, {"blank_index": 18709}),
}
"""Recognition's culprits (issue 39): the values PaddleOCR's configs and ports use."""


def recognition_hypotheses(reference) -> list:
    """Every candidate change of the reference's ``[recognition]`` that differs from it."""
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
