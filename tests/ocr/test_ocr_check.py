"""`harness check --task ocr` against this repository's OCR pipeline, served for real (ocr_dali,
ocr_opencv: Python-backend BLS over the detection ensembles and the recognizer, cpu profile),
on words rendered onto real photos.

The server serves ``specs/ocr/small.toml`` (the detector at a CI-sized input); the planted specs
of ``specs/ocr/planted/`` change only what training did (``[reference.recognition]``), so one
server serves them all, and each must fail at its own word stage.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.paths import PROJECT_ROOT
from harness.repository import build_cpu_profile, with_called_models
from harness.server import TritonServer, free_port
from loadtest.answers import WRONG_ANSWER
from tests.commands import harness
from tests.conftest import pipeline_models
from tests.loadtest.planted import add_wrong_every_other
from tests.loadtest.test_sweep import against, sweep
from tests.ocr.conftest import CLEAN, LONG_LINE, SAMPLE

pytestmark = pytest.mark.server

SPECS = PROJECT_ROOT / "specs"
SMALL = SPECS / "ocr" / "small.toml"
BAD_TEXTS = ("ocr_invalid_utf8", "ocr_empty_text")
"""Foreign OCR deployments (tests/ocr/bad_texts): ocr_opencv's answer, its first word's text not
UTF-8, or empty."""
WRONG_WORDS = "ocr_wrong"
"""ocr_dali's answer with every second request's first word misread (tests/loadtest/planted.py)."""
MODELS = [*pipeline_models("ocr"), *BAD_TEXTS, WRONG_WORDS]
"""What check reads of both pipelines and the planted deployments (the models their BLS calls come
along: :func:`harness.repository.with_called_models`)."""


def add_bad_texts(profile):
    """The foreign deployments answering a bad text, beside the repository's own models."""
    from harness.repository import load_config, save_config

    for name, mode in zip(BAD_TEXTS, ("invalid", "empty")):
        config = load_config(profile / "ocr_opencv" / "config.pbtxt")
        kept = [o for o in config.output if o.name in ("BOXES", "SCORES", "TEXTS", "PROBABILITY", "GEOMETRY")]
        del config.output[:]
        config.output.extend(kept)
        config.name = name
        config.ClearField("dynamic_batching")
        config.ClearField("instance_group")
        config.parameters.clear()
        config.parameters["mode"].string_value = mode
        (profile / name / "1").mkdir(parents=True)
        (profile / name / "1" / "model.py").write_text((Path(__file__).parent / "bad_texts" / "model.py").read_text())
        save_config(config, profile / name / "config.pbtxt")


@pytest.fixture(scope="module")
def ocr_server(repository, tmp_path_factory):
    profile = build_cpu_profile(repository, tmp_path_factory.mktemp("ocr") / "repository",
                                {"detection.toml": SPECS / "detection" / "small.toml", "ocr.toml": SMALL})
    add_bad_texts(profile)
    add_wrong_every_other(profile, WRONG_WORDS, "ocr_dali", "word")
    triton = TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=with_called_models(profile, MODELS))
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


def check(server, images, report, *args, protocol="grpc"):
    result = harness("check", images, "--task", "ocr", "--url", server.url(protocol), "--protocol", protocol,
                     "--report", report, *args)
    return result, json.loads((report / "report.json").read_text())


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_aligned_pipeline_reads_every_word_alike(ocr_server, words, tmp_path, protocol):
    result, report = check(ocr_server, words, tmp_path, "--spec", SMALL, protocol=protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    f = report["task_figures"]
    assert f["matched"] == f["reference_boxes"] == f["deployed_boxes"] >= 10
    # every matched box's word read alike; those scoring below the text score dropped on both sides
    assert f["words_matched"] == f["words_exact"] == f["matched"] - f["words_dropped"] and f["cer"] == 0.0
    assert not f["word_culprits"] and not report["events"]
    # the vertical words of the turned photo are found and read alike too (turned upright by the rotation rule)
    rows = {row["image"]: row for row in csv.DictReader((tmp_path / "per_image.csv").open())}
    assert int(rows["0009_turned.jpg"]["words_exact"]) >= 2
    assert "read alike" in (tmp_path / "report.md").read_text()


def test_the_opencv_twin_reads_alike(ocr_server, words, tmp_path):
    result, report = check(ocr_server, words, tmp_path, "--spec", SMALL, "--pipeline", "opencv", "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["task_figures"]["words_exact"] == report["task_figures"]["words_matched"] >= 10


@pytest.mark.parametrize("plant, stage", [
    ("imagenet_normalization", "input"), ("width_cap", "input"), ("channel_order", "input"),
    ("axis_aligned", "crop"), ("no_rotation", "crop"), ("blank_offset", "text")])
def test_a_planted_cause_fails_at_its_word_stage(ocr_server, words, tmp_path, plant, stage):
    result, report = check(ocr_server, words, tmp_path, "--spec", SPECS / "ocr" / "planted" / f"{plant}.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    f = report["task_figures"]
    assert set(f["word_culprits"]) == {stage}, f["word_culprits"]
    # the detection stages are untouched by a recognition plant: the boxes all match
    assert f["matched"] == f["reference_boxes"] == f["deployed_boxes"]
    stages = {s["name"]: s["verdict"] for s in report["stages"]}
    assert stages["postprocess"] == "diverged" and stages["output"] in ("equal", "close")
    if plant == "no_rotation":  # only the turned photo's upright words are cut differently
        assert {e["image"] for e in report["events"]} == {"0009_turned.jpg"}


def test_no_text_one_character_and_a_long_line_agree(ocr_server, odd_words, tmp_path):
    """No words on either side is agreement; a word of one character and a long line are read alike."""
    result, report = check(ocr_server, odd_words, tmp_path, "--spec", SMALL, "--pipeline", "opencv", "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["image"]: row for row in csv.DictReader((tmp_path / "per_image.csv").open())}
    assert rows["no_text.jpg"]["reference_boxes"] == rows["no_text.jpg"]["deployed_boxes"] == "0"
    for name in ("one_character.jpg", "long_line.jpg"):
        assert int(rows[name]["words_matched"]) >= 1 and rows[name]["words_exact"] == rows[name]["words_matched"], rows[name]


@pytest.mark.parametrize("plant, culprit", [("imagenet_normalization", "recognition normalization"),
                                            ("no_rotation", "rotation rule")])
def test_diagnose_names_a_planted_recognition_cause(ocr_server, words, tmp_path, plant, culprit):
    """Among the detector's culprits and recognition's, diagnose names the one planted (each of the
    six plants was named alike when measured: docs/ocr.md)."""
    diagnosis = harness("diagnose", words, "--task", "ocr", "--url", ocr_server.grpc_url,
                        "--spec", SPECS / "ocr" / "planted" / f"{plant}.toml", "--report", tmp_path, timeout=900)
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    assert [c["culprit"] for c in found["causes"]] == [culprit], diagnosis.stdout + diagnosis.stderr


@pytest.fixture(scope="module")
def lined_words(tmp_path_factory) -> Path:
    """A photo holding three words and a line of text (the guacamole, which has no text of its own): one
    batch of rapidocr's 6, the line its widest."""
    import random

    import cv2

    from harness.detection.data import RenderSettings, render_words

    settings = RenderSettings(words=(4, 5), height=(0.05, 0.08), max_angle=0,
                              vocabulary=("harbour", "Sundays", "market", "7", "opens", LONG_LINE))
    rgb = cv2.cvtColor(cv2.imread(str(SAMPLE / CLEAN)), cv2.COLOR_BGR2RGB)
    drawn, placed = render_words(rgb, random.Random(4), settings)
    assert [w.text for w in placed] == ["market", "opens", LONG_LINE, "harbour"]
    out = tmp_path_factory.mktemp("lined")
    cv2.imwrite(str(out / "lined.jpg"), cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
    return out


def test_diagnose_names_the_batch_padding_and_the_spec_it_writes_passes(ocr_server, lined_words, tmp_path):
    """Training padded each word to the widest of its batch ([reference.recognition] batch = 6, rapidocr's
    rec_batch_num), the deployment pads each alone: the words batched with the line diverge at their
    input; diagnose names the batch padding and writes batch = 1, under which check passes."""
    spec = tmp_path / "batched.toml"
    spec.write_text(f'extends = "{SMALL}"\n[reference.recognition]\nbatch = 6\n')
    result, report = check(ocr_server, lined_words, tmp_path / "check", "--spec", spec)
    assert result.returncode == 1, result.stdout + result.stderr
    assert set(report["task_figures"]["word_culprits"]) == {"input"}, report["task_figures"]
    written = tmp_path / "written.toml"
    diagnosis = harness("diagnose", lined_words, "--task", "ocr", "--url", ocr_server.grpc_url, "--spec", spec,
                        "--report", tmp_path / "diagnose", "--write-spec", written, timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert [c["culprit"] for c in found["causes"]] == ["recognition batch padding"], diagnosis.stdout + diagnosis.stderr
    assert "[reference.recognition]\nbatch = 1" in written.read_text()
    result, _ = check(ocr_server, lined_words, tmp_path / "written", "--spec", written)
    assert result.returncode == 0, result.stdout + result.stderr


def test_accuracy_scores_words_per_path(ocr_server, words, tmp_path):
    """`accuracy --task ocr` on the generator's COCO labels (each annotation's `text`): aligned, every
    path reads as the reference does; with training's blank last, the reference reads no word right."""
    labels = words.parent / "labels.json"

    def accuracy(spec, report):
        result = harness("accuracy", labels, "--task", "ocr", "--url", ocr_server.grpc_url, "--spec", spec,
                         "--pipeline", "dali", "--pipeline", "opencv", "--report", report, timeout=900)
        return result, json.loads((report / "accuracy.json").read_text())["effect"]

    result, effect = accuracy(SMALL, tmp_path / "aligned")
    assert result.returncode == 0, result.stdout + result.stderr
    reference, *deployed = effect["paths"]
    assert reference["labeled_words"] >= 6 and reference["word_accuracy"] >= 0.5
    for path in deployed:
        assert (path["word_accuracy"], path["cer"], path["f1"]) == (reference["word_accuracy"], reference["cer"],
                                                                     reference["f1"]) and not path["changes"]
    result, effect = accuracy(SPECS / "ocr" / "planted" / "blank_offset.toml", tmp_path / "planted")
    assert result.returncode == 1, result.stdout + result.stderr
    reference, dali, _ = effect["paths"]
    assert reference["word_accuracy"] == 0 and reference["cer"] > 0.9 and dali["word_accuracy"] >= 0.5
    assert len(dali["changes"]) == effect["evaluated"]


def raw_infer(server, protocol: str, model: str, data: bytes, outputs=None):
    """One request as any client sends it: tritonclient itself, outputs named or not (None: all)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.url(protocol))
    tensor = module.InferInput("IMAGE", [1, len(data)], "UINT8")
    tensor.set_data_from_numpy(np.frombuffer(data, np.uint8)[None])
    asked = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    result = client.infer(model, [tensor], outputs=asked)
    response = result.get_response()
    names = [o["name"] for o in response["outputs"]] if protocol == "http" else [o.name for o in response.outputs]
    return {name: result.as_numpy(name) for name in names}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_page_of_words_reads_at_most_max_words_and_a_client_naming_no_outputs_gets_no_word_taps(ocr_server,
                                                                                                  protocol):
    """Issue 45: a 109 KB image of 101 words answered 1.31 GB to a client naming no outputs (every
    word's crop, input and per-step probabilities); the spec's max_words (16 in the small spec)
    bounds the words read, the rest counted in WORDS_UNREAD; the word taps are ocr_*_taps's, by name."""
    from tests.attack_files import text_page

    page = text_page(640, 4, 6, 40)  # 24 words
    for model in ("ocr_dali", "ocr_opencv"):
        answer = raw_infer(ocr_server, protocol, model, page)
        size = sum(a.nbytes for a in answer.values())
        assert size < 20e6 and not any(name.startswith("WORD_") for name in answer), (model, size, sorted(answer))
        assert answer["TEXTS"].shape == (1, 16) and answer["BOXES"].shape[1] == 16 and answer["WORDS_UNREAD"][0, 0] == 8
    taps = raw_infer(ocr_server, protocol, "ocr_dali_taps", page, ["TEXTS", "WORD_OUTPUTS", "WORD_OUTPUT_SHAPES"])
    assert taps["WORD_OUTPUTS"].shape[:2] == (1, 16) and taps["TEXTS"].shape == (1, 16)


def test_a_page_beyond_max_words_checks_alike_the_reference_reading_the_same_boxes(ocr_server, tmp_path):
    from tests.attack_files import text_page

    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "page.jpg").write_bytes(text_page(640, 4, 6, 40))
    result, report = check(ocr_server, tmp_path / "images", tmp_path / "r", "--spec", SMALL, "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = [json.loads(line) for line in (tmp_path / "r" / "images.jsonl").read_text().splitlines()]
    assert row["outcome"] == "compared", row


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bad_image_is_the_clients_error_in_both_ocr_models(ocr_server, protocol):
    from tritonclient.utils import InferenceServerException

    from tests.attack_files import webp_lossless

    for model in ("ocr_dali", "ocr_opencv"):
        with pytest.raises(InferenceServerException) as refused:
            raw_infer(ocr_server, protocol, model, webp_lossless(13376), ["TEXTS"])
        assert "image too large for its coding" in str(refused.value)
        assert str(refused.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT"), refused.value.status()


def test_accuracy_on_hostile_labels_gives_each_entry_its_row_and_reads_nothing_outside(ocr_server, words, tmp_path):
    """Issue 45: a COCO box of NaN/Infinity or 1e308 (a shapely traceback after the whole run
    before) and image names leading outside the set (read, sent and their bytes shown before):
    each is its own failed row with its reason, the rest is scored, the report written."""
    import os
    import shutil

    secret = tmp_path / "secret.txt"
    secret.write_text("top secret bytes")
    folder = tmp_path / "set"
    shutil.copytree(words, folder / "images")
    good = sorted(p.name for p in (folder / "images").glob("*.jpg"))[0]
    os.symlink(secret, folder / "images" / "link.jpg")
    names = [good, good.replace(".jpg", "_nan.jpg"), "../../secret.txt", str(secret), "link.jpg"]
    shutil.copy(folder / "images" / good, folder / "images" / names[1])
    labels = json.loads((words.parent / "labels.json").read_text())
    first = next(i["id"] for i in labels["images"] if Path(i["file_name"]).name == good)
    own = [a for a in labels["annotations"] if a["image_id"] == first]
    coco = {"images": [{"id": i, "file_name": n} for i, n in enumerate(names)], "categories": labels["categories"],
            "annotations": [{**a, "id": k, "image_id": 0} for k, a in enumerate(own)]
            + [{"id": 100 + i, "image_id": i, "category_id": own[0]["category_id"], "text": "x",
                "bbox": [float("nan"), 10, float("inf"), 5] if i == 1 else [1, 2, 3, 4]} for i in range(1, 5)]}
    (folder / "images" / "labels.json").write_text(json.dumps(coco))
    result = harness("accuracy", folder / "images", "--labels", folder / "images" / "labels.json", "--task", "ocr",
                     "--url", ocr_server.grpc_url, "--spec", SMALL, "--pipeline", "opencv", "--report",
                     tmp_path / "r", timeout=600)
    assert result.returncode in (0, 1) and "Traceback" not in result.stdout + result.stderr, result.stderr
    report = json.loads((tmp_path / "r" / "accuracy.json").read_text())
    failed = {row["image"]: row["reason"] for row in report["failed"]}
    assert set(failed) == set(names[1:]) and "is not finite" in failed[names[1]], failed
    assert all("not a path inside" in failed[n] for n in names[2:4]) and "outside the folder" in failed["link.jpg"]
    markdown = (tmp_path / "r" / "accuracy.md").read_text()
    assert "top secret" not in markdown and "746f7020" not in markdown  # neither the bytes nor their hex
    assert report["effect"]["evaluated"] == 1


def test_a_deployment_answering_text_that_is_not_utf8_or_empty_gets_rows_not_a_crash(ocr_server, words, tmp_path,
                                                                                     repository):
    """A foreign OCR deployment (--model, discovered as ocr by its texts and boxes) whose first word
    is not UTF-8: each image's row names it (rejected by the deployment); one whose first word is
    empty: a word read as nothing, a divergence."""
    detector = ("--reference-model", repository / "detector" / "model.onnx")
    result = harness("check", words, "--model", "ocr_invalid_utf8", *detector, "--url", ocr_server.grpc_url,
                     "--spec", SMALL, "--report", tmp_path / "invalid")
    # every photo has a word, so every one is rejected by the deployment: nothing compared (exit 2)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    rows = list(csv.DictReader((tmp_path / "invalid" / "per_image.csv").open()))
    assert rows and all("text 0 is not UTF-8" in row["error"] for row in rows), rows
    result, report = check(ocr_server, words, tmp_path / "empty", "--model", "ocr_empty_text", *detector, "--spec", SMALL)
    assert result.returncode == 1, result.stdout + result.stderr
    changes = [c for e in report["events"] for c in e["word_changes"]]
    assert len(report["events"]) == len(rows) and {c["deployed_text"] for c in changes} == {""}
    assert all(c["cer"] == 1.0 and c["verdict"] == "diverged" for c in changes)


def test_infer_shows_each_boxs_word(ocr_server, words):
    """`harness infer --task ocr`: each box with the word each pipeline reads in it (the generator's
    words, as labels.json holds them, are among what both read)."""
    result = harness("infer", words, "--task", "ocr", "--pipeline", "dali", "--pipeline", "opencv",
                     "--url", ocr_server.grpc_url, "--top-k", "9")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ocr_dali" in result.stdout and "ocr_opencv" in result.stdout
    labels = json.loads((words.parent / "labels.json").read_text())
    shown = [a["text"] for a in labels["annotations"] if f"'{a['text']}'" in result.stdout]
    assert len(shown) >= len(labels["annotations"]) // 2, (shown, result.stdout)


def test_the_sweep_verifies_every_word_and_reports_the_wrong_ones(ocr_server, words, tmp_path):
    """Every answer of ocr_dali under load judged against its photo's words alone (verified, none
    wrong); a model misreading every second request's first word: its wrong words reported."""
    run = sweep(*against(ocr_server), "--model", "ocr_dali", "--model", WRONG_WORDS, "--clients", 1, "--protocols", "grpc",
                "--warmup", "1", "--duration", "3", "--images", words, "--report", tmp_path, timeout=300)
    assert run.returncode == 1, run.stderr  # the wrong words fail the sweep
    stats = {p["ensemble"]: p["stats"] for p in json.loads((tmp_path / "results.json").read_text())["points"]}
    for model, wrong in (("ocr_dali", False), (WRONG_WORDS, True)):
        s = stats[model]
        assert s["requests"] > 0 and s["verified"] == s["requests"] and s["unverified"] == 0, (model, s)
        assert (s["wrong_answers"] > 0) is wrong and s["errors"] == ({WRONG_ANSWER: s["wrong_answers"]} if wrong else {})
    assert f"{WRONG_WORDS} x1: {stats[WRONG_WORDS]['wrong_answers']} wrong answers of" in run.stderr


def test_the_watch_judges_the_words(ocr_server, words, tmp_path):
    watch = harness("watch", "--url", ocr_server.grpc_url, "--once", "--known-answers", tmp_path, "--images", words,
                    "--model", "ocr_dali", "--model", WRONG_WORDS, "--photo-count", 3)  # odd: every second is wrong
    assert watch.returncode == 1, watch.stderr
    rows = {(r[0].strip(), r[1].strip()): r for r in (line.split("|")[1:-1] for line in watch.stdout.splitlines()[2:])}
    assert float(rows["ocr_dali", "alone"][3]) == 1.0 and int(rows["ocr_dali", "alone"][4]) == 0
    assert float(rows[WRONG_WORDS, "alone"][3]) < 1.0 and int(rows[WRONG_WORDS, "alone"][4]) > 0
    assert "words read otherwise" in watch.stderr
