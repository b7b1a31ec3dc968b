"""The recognition pipeline without a server: the reference agrees with rapidocr's own code on
real photos, CTC decoding, the spec's [recognition] table, the word tensors' packing, the CER."""

from __future__ import annotations

import random
from dataclasses import replace

import cv2
import numpy as np
import pytest

from harness.detection.boxes import order_clockwise
from harness.detection.data import render_words
from harness.ocr.compare import WordRules, character_error_rate, edit_distance, step_verdict
from harness.ocr.recognition import (
    CtcDecoder,
    Recognition,
    batch_ratios,
    input_width,
    input_widths,
    parameters,
    to_input,
    to_inputs,
)
from harness.ocr.recognizer import TextRecognizer
from harness.ocr.tensors import decode_texts, pack_ragged, unpack_ragged
from harness.operations.word_crop import crop_box
from harness.paths import PROJECT_ROOT
from harness.spec import SpecError, load_spec
from harness.verdict import Verdict
from tests.ocr.conftest import PHOTOS, SAMPLE


@pytest.fixture(scope="module")
def recognizer():
    return TextRecognizer()


def test_the_reference_is_rapidocrs_recognition_on_real_photos(recognizer):
    """Words rendered onto real photos: the reference's crop and input equal rapidocr's
    get_rotate_crop_image and resize_norm_img bit for bit, and it reads every word."""
    from rapidocr.ch_ppocr_rec.main import TextRecognizer as RapidRecognizer
    from rapidocr.utils.process_img import get_rotate_crop_image

    p = parameters(load_spec(PROJECT_ROOT / "model_repository" / "ocr.toml").recognition)
    decoder = CtcDecoder(recognizer.characters, p.blank_index)
    rng, read, total = random.Random(0), 0, 0
    shape = type("Shape", (), {"rec_image_shape": [3, 48, 320]})()
    for name in PHOTOS[:2]:
        rgb = cv2.cvtColor(cv2.imread(str(SAMPLE / name)), cv2.COLOR_BGR2RGB)
        drawn, words = render_words(rgb, rng)
        bgr = np.ascontiguousarray(drawn[..., ::-1])
        for word in words:
            crop = crop_box(drawn, word.quad, p)
            theirs = get_rotate_crop_image(bgr, word.quad.astype(np.float32))
            np.testing.assert_array_equal(crop[..., ::-1], theirs)
            x = to_input(crop, p, "RGB")
            np.testing.assert_array_equal(x, RapidRecognizer.resize_norm_img(
                shape, theirs, max(320 / 48, theirs.shape[1] / theirs.shape[0])))
            read += decoder(recognizer(x))[0] == word.text
            total += 1
    assert total >= 4 and read == total


def test_a_tall_crop_is_turned_upright_and_a_wide_one_is_not():
    image = np.zeros((200, 200, 3), np.uint8)
    tall = np.array([[10, 10], [30, 10], [30, 100], [10, 100]], np.float32)
    assert crop_box(image, tall, Recognition()).shape[:2] == (20, 90)
    assert crop_box(image, tall, Recognition(rotate_ratio=0)).shape[:2] == (90, 20)
    wide = np.array([[10, 10], [100, 10], [100, 30], [10, 30]], np.float32)
    assert crop_box(image, wide, Recognition()).shape[:2] == (20, 90)


def test_the_input_width_follows_the_aspect_ratio_padded_and_capped():
    p = Recognition()
    short = to_input(np.full((20, 20, 3), 255, np.uint8), p)
    assert short.shape == (3, 48, 320) and (short[:, :, :48] == 1).all() and (short[:, :, 48:] == 0).all()
    long = to_input(np.full((10, 2000, 3), 255, np.uint8), p)
    assert long.shape == (3, 48, p.max_width)


def test_ctc_merges_repeats_drops_blanks_and_keeps_the_space():
    decoder = CtcDecoder(["a", "b"])  # classes: blank, a, b, space
    steps = np.eye(4, dtype=np.float32)[[1, 1, 0, 1, 2, 3, 2]]
    assert decoder(steps) == ("aab b", 1.0)
    assert decoder(np.eye(4, dtype=np.float32)[[0, 0]]) == ("", 0.0)
    with pytest.raises(ValueError, match=r"\[steps, 4\]"):
        decoder(np.zeros((3, 5), np.float32))
    last = CtcDecoder(["a", "b"], blank_index=3)  # the blank last: class 0 is 'a'
    assert last(np.eye(4, dtype=np.float32)[[0, 3, 0]]) == ("aa", 1.0)


def test_the_spec_refuses_a_bad_recognition_table(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'extends = "{PROJECT_ROOT / "model_repository" / "ocr.toml"}"\n[recognition]\ncrop = "round"\n')
    with pytest.raises(SpecError, match="crop must be one of perspective, axis_aligned"):
        load_spec(bad)
    bad.write_text(f'extends = "{PROJECT_ROOT / "model_repository" / "ocr.toml"}"\n[reference.recognition]\nheigth = 32\n')
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['heigth'\]"):
        load_spec(bad)
    for value, said in (("1.5", "a score from 0 to 1"), ('"high"', "must be a number")):
        bad.write_text(f'extends = "{PROJECT_ROOT / "model_repository" / "ocr.toml"}"\n[recognition]\ntext_score = {value}\n')
        with pytest.raises(SpecError, match=said):
            load_spec(bad)


def test_word_tensors_travel_padded_with_their_shapes():
    words = [np.ones((3, 48, 320), np.float32), np.full((3, 48, 400), 2, np.float32)]
    padded, shapes = pack_ragged(words, (3, 48, 0), np.float32)
    assert padded.shape == (2, 3, 48, 400) and shapes.tolist() == [[3, 48, 320], [3, 48, 400]]
    assert all(np.array_equal(a, b) for a, b in zip(unpack_ragged(padded, shapes), words))
    empty, none = pack_ragged([], (3, 48, 0), np.float32)
    assert empty.shape == (0, 3, 48, 0) and unpack_ragged(empty, none) == []
    with pytest.raises(ValueError, match="does not fit"):
        unpack_ragged(padded, np.array([[3, 48, 500], [3, 48, 1]]))


def test_texts_that_are_not_utf8_are_named():
    assert decode_texts(np.array([b"caf\xc3\xa9", b""], dtype=object)) == ["café", ""]
    with pytest.raises(ValueError, match=r"text 1 is not UTF-8"):
        decode_texts(np.array([b"ok", b"\xff\xfe"], dtype=object))


def test_character_error_rate_and_the_step_rules():
    assert edit_distance("kitten", "sitting") == 3
    assert character_error_rate("planet", "planet.") == pytest.approx(1 / 6)
    assert character_error_rate("", "ab") == 2.0 and character_error_rate("", "") == 0.0
    rules = WordRules()
    assert step_verdict("text", "SALE", "SALE", rules) == (Verdict.EQUAL, 0.0)
    assert step_verdict("input", np.zeros((3, 48, 320)), np.full((3, 48, 320), 0.01), rules)[0] is Verdict.CLOSE
    assert step_verdict("input", np.zeros((3, 48, 320)), np.zeros((3, 48, 160)), rules)[0] is Verdict.DIVERGED


@pytest.mark.parametrize("p", [Recognition(), Recognition(crop="axis_aligned", channel_order="RGB", pad_value=-1.0)],
                         ids=["aligned", "axis_aligned_rgb_pad"])
def test_the_dali_graph_makes_the_references_crops_and_inputs(p):
    """ocr_preprocess_dali's graph (on the CPU) on words rendered onto a real photo, level and
    turned a quarter (upright words: the turn folded into the warp), each given its region of the
    decoded image: the same crop sizes, crops within a few levels, inputs within one level of the
    reference's OpenCV."""
    from harness.ocr.dali_recognition import CpuRecognitionRunner, word_samples

    rgb = cv2.cvtColor(cv2.imread(str(SAMPLE / PHOTOS[2])), cv2.COLOR_BGR2RGB)
    drawn, words = render_words(rgb, random.Random(0))
    runner = CpuRecognitionRunner(p, 8)
    for turned in (False, True):
        image = np.ascontiguousarray(np.rot90(drawn, -1)) if turned else drawn
        # the detector's order: clockwise from the top left, so an upright word's box is tall
        quads = [order_clockwise(np.array([[drawn.shape[0] - 1 - y, x] for x, y in w.quad])) if turned else w.quad
                 for w in words]
        encoded = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])[1]
        decoded = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        made = runner.run(word_samples(decoded, quads, p))
        assert len(made) == len(quads) >= 2
        if turned:  # the turn folded into the warp is exercised
            assert any(np.linalg.norm(q[0] - q[3]) >= 1.5 * np.linalg.norm(q[0] - q[1]) for q in quads)
        for quad, (crop, x) in zip(quads, made):
            reference = crop_box(decoded, quad, p)
            assert crop.shape == reference.shape
            assert np.abs(crop.astype(int) - reference).mean() < 0.05
            assert np.abs(x - to_input(reference, p, "RGB")).max() <= 2 / 127.5 + 1e-6


def test_the_load_tests_rule_judges_an_ocr_models_words():
    """loadtest.answers asks the OCR task's rule: the boxes by the detection rule, then the words of matched boxes."""
    from harness.ocr.compare import judge_answer as judge_words
    from loadtest.answers import rule_for

    quads = np.array([[[10, 10], [90, 10], [90, 40], [10, 40]], [[10, 60], [90, 60], [90, 90], [10, 90]]], np.float32)
    known = {"BOXES": quads, "SCORES": np.array([0.9, 0.8], np.float32),
             "TEXTS": np.array([b"SALE", b"caf\xc3\xa9"], dtype=object)}
    assert rule_for(known) is judge_words
    assert judge_words(known, dict(known)).change is None
    other = {**known, "TEXTS": np.array([b"SALE", b"cafe"], dtype=object)}
    judged = judge_words(known, other)
    assert judged.change == "1 of 2 words read otherwise than the photo alone: 'cafe' where it answers 'café'"
    fewer = {"BOXES": quads[:1], "SCORES": known["SCORES"][:1], "TEXTS": known["TEXTS"][:1]}
    assert "1 missed" in judge_words(known, fewer).change


def test_a_changed_word_is_a_tie_only_where_the_reference_was_unsure():
    """The reference reads "ab", its last character 0.50 against "c" 0.46. A deployment reading "ac" there,
    with its "a" one step later (a CTC alignment shift, led by 0.9: the text unchanged by it), needs only
    the unsure step: a tie, every step within its rule. Needing a step led by 0.6, it diverges, its culprit
    the stage that made it; with no output to tell by, the culprit says so."""
    from harness.ocr.compare import WordPair, WordRules, needed_leads
    from harness.task import get_task
    from harness.verdict import Verdict

    task = get_task("ocr").configure(load_spec(PROJECT_ROOT / "model_repository" / "ocr.toml"))
    decoder = task.decoder(task.recognition.reference)
    index = {c: decoder.characters.index(c) + 1 for c in "abc"}  # the blank is class 0
    reference = np.zeros((4, decoder.classes), np.float32)
    reference[0, index["a"]], reference[0, 0] = 0.95, 0.05
    reference[1, 0] = 0.9
    reference[2, index["b"]], reference[2, index["c"]] = 0.5, 0.46
    reference[3, 0] = 0.9
    deployed = reference.copy()
    deployed[0, index["a"]], deployed[0, 0] = 0.05, 0.95  # "a" moves one step later: read alike
    deployed[1, index["a"]], deployed[1, 0] = 0.9, 0.0
    deployed[2, index["b"]], deployed[2, index["c"]] = 0.45, 0.51
    assert decoder(reference)[0] == "ab" and decoder(deployed)[0] == "ac"
    leads = needed_leads(reference, deployed, decoder.text)
    assert [step for step, _ in leads] == [2] and leads[0][1] == pytest.approx(0.04)

    within = {"crop": (Verdict.EQUAL, 0.0), "input": (Verdict.CLOSE, 0.0078), "output": (Verdict.EQUAL, 0.0),
              "text": (Verdict.EQUAL, 0.0), "kept": (Verdict.EQUAL, 0.0)}
    rules = WordRules()
    tie = WordPair(0, 0, "ab", "ac", -0.01, within, True, leads=leads, made_by="input", reference_score=0.8)
    assert tie.verdict is Verdict.TIE and tie.culprit is None
    assert "made by the input (close: error 0.0078)" in tie.evidence(rules) and "0.040 at step 2" in tie.evidence(rules)
    sure = WordPair(0, 0, "ab", "ac", -0.2, within, False, leads=((2, 0.6),), made_by="input", reference_score=0.8)
    assert sure.verdict is Verdict.DIVERGED and sure.culprit == "input" and "0.600 at step 2" in sure.evidence(rules)
    # another crop of the word: a box the detection rule holds explains any lead (one moved within the close
    # rule, or beyond it near the binarization threshold: a detection tie); a box beyond it, not
    for iou, held, near, verdict in ((0.95, True, False, Verdict.TIE), (0.6, False, False, Verdict.DIVERGED),
                                     (0.6, True, True, Verdict.TIE)):
        moved = WordPair(0, 0, "ab", "ac", -0.2, within, False, leads=((2, 0.6),), made_by="box", reference_score=0.8,
                         box_move=(2.2, iou, held, near))
        moved = WordPair(**{**moved.__dict__, "near_tie": task.is_tie(moved, reference, rules)})
        assert moved.verdict is verdict and moved.culprit == (None if held else "box")
        assert f"a corner moved 2.2 px, IoU {iou:.3f}" in moved.evidence(rules)
        assert ("near the binarization threshold" in moved.evidence(rules)) is near
    blind = WordPair(0, 0, "ab", "ac", 0.0, {}, False)
    assert blind.culprit == "text" and "no deployed output" in blind.evidence(rules)
    beyond = WordPair(0, 0, "ab", "ac", 0.0, {**within, "input": (Verdict.DIVERGED, 0.3)}, True, leads=leads)
    assert beyond.verdict is Verdict.DIVERGED and beyond.culprit == "input"
    # the old rule's fallback, by the reference's output alone: its unsure step flipped reads "ac"
    assert task.near_tie(reference, "ac", 0.1) and not task.near_tie(reference, "ac", 0.01)


def test_a_word_kept_on_one_side_only_is_a_tie_near_the_threshold():
    """rapidocr drops a word scoring below text_score (0.5): a word kept on one side only is a change of
    the answer, a tie where both scores lie within score_margin (0.12) of the threshold; a word neither
    side keeps is no answer (its text changes nothing a user sees)."""
    from harness.ocr.compare import WordPair, WordRules
    from harness.task import get_task
    from harness.verdict import Verdict

    task = get_task("ocr").configure(load_spec(PROJECT_ROOT / "model_repository" / "ocr.toml"))
    assert task.recognition.reference.text_score == 0.5 and task.recognition.reference.keeps(0.5)
    steps = {"crop": (Verdict.EQUAL, 0.0), "input": (Verdict.CLOSE, 0.0078), "kept": (Verdict.EQUAL, 0.0)}
    rules = WordRules()

    def pair(ref_score, dep_score, texts=("EXIT", "EXIT")):
        p = WordPair(0, 0, *texts, dep_score - ref_score, steps, False, ref_score >= 0.5, dep_score >= 0.5,
                     reference_score=ref_score, made_by="input")
        return WordPair(**{**p.__dict__, "near_tie": task.is_tie(p, None, rules)})

    near = pair(0.52, 0.47)
    assert near.changed and near.verdict is Verdict.TIE and near.visible_texts == ("EXIT", "")
    assert "scores 0.520 -> 0.470 around the threshold" in near.evidence(rules)
    far = pair(0.9, 0.3)
    assert far.verdict is Verdict.DIVERGED and far.culprit == "input"
    dropped = pair(0.2, 0.3, ("m", "mE"))
    assert not dropped.answered and not dropped.changed and dropped.verdict is Verdict.CLOSE
    metrics = task.word_metrics([near, far, dropped], rules)
    assert metrics["words_matched"] == 2 and metrics["words_dropped"] == 1 and metrics["words_exact"] == 0


def test_the_report_draws_each_sides_words_and_marks_a_changed_one():
    from harness.detection.boxes import Detections
    from harness.detection.draw import draw_comparison

    rgb = cv2.cvtColor(cv2.imread(str(SAMPLE / PHOTOS[0])), cv2.COLOR_BGR2RGB)
    drawn, words = render_words(rgb, random.Random(0))
    boxes = Detections(np.stack([w.quad for w in words]), np.ones(len(words)))
    said = [w.text for w in words]

    def red(image):
        return int(((image[..., 0] > 200) & (image[..., 1] < 40) & (image[..., 2] < 40)).sum())

    alike = draw_comparison(drawn, boxes, boxes, texts=(said, said))
    changed = draw_comparison(drawn, boxes, boxes, texts=(said, ["caf\u00e9", *said[1:]]))
    assert alike.shape == changed.shape and red(alike) == 0 and red(changed) >= 5  # thin anti-aliased text
    assert not np.array_equal(alike, draw_comparison(drawn, boxes, boxes))  # the words are written


def test_at_most_max_words_are_read_the_highest_scores_in_the_detectors_order():
    from harness.ocr.recognition import words_read

    p = Recognition(max_words=3)
    assert list(words_read(np.array([0.9, 0.5, 0.8, 0.95, 0.5]), p)) == [0, 2, 3]
    assert list(words_read(np.array([0.5, 0.5, 0.5, 0.5]), p)) == [0, 1, 2]  # ties: the earlier boxes
    assert list(words_read(np.array([0.7, 0.6]), p)) == [0, 1] and len(words_read(np.zeros(0), p)) == 0
    with pytest.raises(ValueError, match="max_words is at least 1"):
        Recognition(max_words=0)
    assert Recognition().max_words == 256


def test_the_dali_graph_bounds_a_crop_and_widths_no_caller_of_the_ocr_model_sends():
    """What the DALI backend (which cannot refuse one sample) runs: a SIZE beyond the region's
    diagonal and WIDTHS beyond the profile are clamped; the cpu profile's model refuses them."""
    from harness.ocr.dali_recognition import CpuRecognitionRunner, check_sample

    p = Recognition()
    region = np.full((20, 60, 3), 128, np.uint8)
    sample = {"IMAGE": [region], "MATRIX": [np.eye(3, dtype=np.float32)], "SIZE": [np.array([20.0, 60.0], np.float32)],
              "WIDTHS": [np.array([120.0, 320.0], np.float32)]}
    check_sample(*(sample[name][0] for name in ("IMAGE", "MATRIX", "SIZE", "WIDTHS")), p)
    runner = CpuRecognitionRunner(p, 2)
    huge = {**sample, "SIZE": [np.array([20.0, 13000.0], np.float32)], "WIDTHS": [np.array([1e6, 1e6], np.float32)]}
    (crop, x), = runner.run(huge)
    assert crop.shape[1] <= 65 and x.shape == (3, 48, p.max_width)  # 13000 wide asked: the region's diagonal
    for name, value, why in (("SIZE", np.array([20.0, 13000.0]), "SIZE must be"), ("WIDTHS", np.array([1.0, 1e6]), "WIDTHS"),
                             ("IMAGE", np.zeros((5, 5)), "IMAGE must be"), ("MATRIX", np.full((3, 3), np.nan), "MATRIX")):
        with pytest.raises(ValueError, match=why):
            check_sample(*({**{k: v[0] for k, v in sample.items()}, name: value}[k] for k in
                           ("IMAGE", "MATRIX", "SIZE", "WIDTHS")), p)


def test_batch_padding_is_rapidocrs_own_batches_on_real_photos():
    """rapidocr's TextRecognizer itself, its recognizer's inputs captured: with ``batch`` 6 (its
    rec_batch_num) each word's input equals the reference's bit for bit, padded to the widest of its
    batch (words sorted by aspect ratio, 6 at a time); with 1 (each word alone), the wider batches'
    words differ."""
    from rapidocr import RapidOCR
    from rapidocr.ch_ppocr_rec.typings import TextRecInput

    rng = random.Random(3)
    rgb = cv2.cvtColor(cv2.imread(str(SAMPLE / PHOTOS[0])), cv2.COLOR_BGR2RGB)
    words = []
    for _ in range(3):  # 3 renderings: more words than a batch, of many widths
        drawn, rendered = render_words(rgb, rng)
        words += [(drawn, w) for w in rendered]
    p = parameters(load_spec(PROJECT_ROOT / "model_repository" / "ocr.toml").recognition)
    crops = [crop_box(drawn, w.quad, p) for drawn, w in words]
    # and strips of the photo wider than 320 / 48, as a line of text is: they widen their batches
    crops += [np.ascontiguousarray(rgb[10 * k:10 * k + 24, :24 * ratio]) for k, ratio in enumerate((8, 11, 15))]
    assert len(crops) > 6  # more than one batch (ties in aspect ratio sort alike: the same numpy argsort)

    recognizer = RapidOCR(params={"Global.log_level": "error"})._load_rec_model()
    theirs = {}
    session = recognizer.session

    def recording(batch):
        for x in batch:  # each row, by the crop its resized part begins with
            theirs[x[:, :, :4].tobytes()] = x
        return session(batch)

    recognizer.session = recording
    recognizer(TextRecInput(img=[np.ascontiguousarray(c[..., ::-1]) for c in crops]))  # BGR, as rapidocr crops
    batched = to_inputs(crops, replace(p, batch=6), "RGB")
    for x in batched:
        np.testing.assert_array_equal(x, theirs[x[:, :, :4].tobytes()])
    alone = to_inputs(crops, p, "RGB")
    assert p.batch == 1 and sum(a.shape != b.shape for a, b in zip(alone, batched)) >= 2


def test_batch_padding_pads_each_word_to_the_widest_of_its_batch_sorted_by_aspect_ratio():
    p = Recognition(batch=2)
    sizes = [(10, 100), (10, 20), (10, 300), (10, 30), (10, 50)]  # ratios 10, 2, 30, 3, 5
    # sorted: 2, 3 | 5, 10 | 30: each padded to its batch's widest (at least width / height = 320 / 48)
    assert batch_ratios(sizes, p) == [10.0, 3.0, 30.0, 3.0, 10.0]
    assert [w for _, w in input_widths(sizes, p)] == [480, 320, 1280, 320, 480]
    assert input_widths(sizes, Recognition()) == [input_width(h, w, Recognition()) for h, w in sizes]
    with pytest.raises(ValueError, match="batch is at least 1"):
        parameters({"batch": 0})
