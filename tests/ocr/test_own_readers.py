"""OCR deployed as users deploy rapidocr (tests/own/seg_ocr.py: one Python model running it
whole, none of this project's names), checked for real on words rendered onto real photos:
``read_text`` answers rapidocr's own boxes [-1, 4, 2], its ``scores`` (the words' recognition
confidence: the boxes have none) and ``texts``; ``read_words`` answers ``regions`` as x, y,
width, height, ``confidence`` and ``words``. Aligned, each reads every word alike; with a hand
port's recognizer preprocessing planted (crops resized with ``INTER_AREA``, ImageNet's mean/std),
each fails at the one word stage it shows, the text."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.detection.data import WORDS, RenderSettings, generate
from harness.paths import PROJECT_ROOT
from tests.commands import harness
from tests.ocr.conftest import SAMPLE
from tests.own.seg_ocr import OCR_SPEC, PLANTED, TEXT_MODEL, WORDS_MODEL

pytestmark = pytest.mark.server

PHOTOS = ("n02165105_tiger_beetle.JPEG", "n02669723_academic_gown.JPEG", "n02097474_Tibetan_terrier.JPEG",
          "n03759954_microphone.JPEG")
SMALL_WORDS = RenderSettings(words=(3, 5), height=(0.04, 0.08))
"""Smaller words than the other OCR tests' (3 to 5 a photo, 4% to 8% of the shorter side): where a
recognizer's preprocessing changes what it reads (seed 2: 3 of their 17 words under the plant)."""


@pytest.fixture(scope="module")
def small_words(tmp_path_factory):
    labels = generate([SAMPLE / name for name in PHOTOS], tmp_path_factory.mktemp("small_words"), len(PHOTOS), seed=2,
                      settings=SMALL_WORDS)
    return labels.parent / "images"


def check(server, images, report, model, protocol="grpc", spec=OCR_SPEC):
    result = harness("check", images, "--task", "ocr", "--model", model, "--url", server.url(protocol),
                     "--protocol", protocol, "--spec", spec, "--reference-model",
                     PROJECT_ROOT / "model_repository" / "detector" / "model.onnx", "--report", report)
    return result, json.loads((report / "report.json").read_text())


@pytest.mark.parametrize("model, protocol, read", [
    (TEXT_MODEL, "grpc", "boxes boxes (quads), no box scores; texts texts, their scores scores"),
    (WORDS_MODEL, "http", "boxes regions (x, y, width, height: a third value below the first on the probe: a width), "
                          "no box scores; texts words, their scores confidence")], ids=["quads", "xywh"])
def test_rapidocr_served_whole_reads_every_word_alike(own_seg_ocr, small_words, tmp_path, model, protocol, read):
    """Its texts found by type and shape under any name, its scores read as the words' (so its boxes
    are compared without scores), [x, y, w, h] told from corners by the probe's boxes and compared
    with the reference's enclosing boxes."""
    result, report = check(own_seg_ocr, small_words, tmp_path, model, protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    assert read in result.stdout
    (post,) = report["stages"]
    assert post["name"] == "postprocess" and post["verdict"] in ("equal", "close")
    f = report["task_figures"]
    assert f["reference_boxes"] == f["deployed_boxes"] == f["matched"] == f["words_exact"] == 17
    assert f["cer"] == 0.0 and not f["word_culprits"] and not report["events"]


@pytest.mark.parametrize("model, protocol", [(TEXT_MODEL + PLANTED, "grpc"), (WORDS_MODEL + PLANTED, "http")])
def test_a_hand_ports_recognizer_preprocessing_fails_at_the_text(own_seg_ocr, small_words, tmp_path, model, protocol):
    result, report = check(own_seg_ocr, small_words, tmp_path, model, protocol)
    assert result.returncode == 1, result.stdout + result.stderr
    f = report["task_figures"]
    assert f["matched"] == 17 and f["words_exact"] < 17 and set(f["word_culprits"]) == {"text"}
    changed = [c for e in report["events"] for c in e["word_changes"]]
    assert changed and all(c["culprit"] == "text" and c["reference_text"] != c["deployed_text"] for c in changed)


BATCHED_WORDS = RenderSettings(words=(5, 8), height=(0.04, 0.08), vocabulary=WORDS + (
    "the harbour market opens at 7 on Sundays", "platform 4 northbound trains delayed"))
"""Small words and lines of text on a photo: rapidocr recognizes them 6 at a time, sorted by aspect
ratio, each padded to the widest of its batch (a line widens the words batched with it)."""
BATCHED_SEED, BATCHED = 5, "0004_n02480855_gorilla.jpg"
"""Of 12 photos so rendered, one where that padding changes a word: rapidocr answers "journey'meadow",
the reference reading each word alone 'journey meadow' (seeds 1 to 8: 3 of 576 words so changed, seeds
5, 6 and 7 one each; none of those 3 photos' 29 words under batch 6)."""


@pytest.fixture(scope="module")
def batched_words(tmp_path_factory):
    labels = generate(sorted(SAMPLE.glob("*.JPEG")), tmp_path_factory.mktemp("batched_words"), 12, seed=BATCHED_SEED,
                      settings=BATCHED_WORDS)
    images = tmp_path_factory.mktemp("batched")
    shutil.copy(labels.parent / "images" / BATCHED, images / BATCHED)
    return images


def test_rapidocrs_batch_padding_is_replayed_by_the_reference(own_seg_ocr, batched_words, tmp_path):
    """The reference reading each word alone (batch 1) differs from rapidocr at one word's text; with
    [reference.recognition] batch = 6 (rapidocr's rec_batch_num) it reads every word alike."""
    result, report = check(own_seg_ocr, batched_words, tmp_path / "check", TEXT_MODEL)
    assert result.returncode == 1, result.stdout + result.stderr
    changed = [c for e in report["events"] for c in e["word_changes"]]
    assert [(c["reference_text"], c["deployed_text"]) for c in changed] == [("journey meadow", "journey'meadow")]
    batched = tmp_path / "batched.toml"
    batched.write_text(f'extends = "{OCR_SPEC}"\n[reference.recognition]\nbatch = 6\n')
    result, report = check(own_seg_ocr, batched_words, tmp_path / "batched", TEXT_MODEL, spec=batched)
    assert result.returncode == 0, result.stdout + result.stderr
    f = report["task_figures"]
    assert f["words_matched"] == f["words_exact"] >= 6 and f["cer"] == 0.0
