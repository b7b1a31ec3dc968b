"""`harness check / diagnose --task segmentation` against this repository's segmenter, served
for real (segment_dali, segment_opencv: the cpu profile, the segmentation models only), on
real photos with a salient animal and one of them dimmed.

The planted specs of ``specs/segmentation/planted/`` change only what training did
([reference]), so one server serves them all.
"""

from __future__ import annotations

import csv
import json

import pytest

from harness.paths import PROJECT_ROOT
from loadtest.answers import WRONG_ANSWER
from tests.commands import harness
from tests.loadtest.test_sweep import against, sweep
from tests.segmentation.conftest import WRONG_MASKS

PLANTED_DIR = PROJECT_ROOT / "specs" / "segmentation" / "planted"


@pytest.fixture(scope="module")
def diagnosed(segmentation_photos, tmp_path_factory):
    """The photos diagnose reads (fewer than check: each hypothesis runs the reference model on
    every one): a salient animal, and the dimmed photo (where max and 255 part)."""
    folder = tmp_path_factory.mktemp("diagnosed")
    for name in ("n01530575_brambling.JPEG", "dim_angora.jpg"):
        (folder / name).write_bytes((segmentation_photos / name).read_bytes())
    return folder


def check(server, images, report, *args, protocol="grpc", html=False):
    result = harness("check", images, "--task", "segmentation", "--url", server.url(protocol), "--protocol", protocol,
                     "--report", report, *args, html=html)
    return result, (json.loads((report / "report.json").read_text()) if (report / "report.json").exists() else None)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_aligned_segmenter_passes(segmentation_server, segmentation_photos, tmp_path, protocol):
    result, report = check(segmentation_server, segmentation_photos, tmp_path, protocol=protocol)
    assert result.returncode == 0, result.stdout + result.stderr
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["decode", "resize", "crop", "input", "output", "postprocess"]
    assert stages["postprocess"]["verdict"] in ("equal", "close") and stages["output"]["verdict"] in ("equal", "close")
    # PIL's edges and passes replayed (resize.resampling = "pil"): DALI's LANCZOS3 within 2 levels of PIL's
    assert stages["resize"]["verdict"] == "close" and stages["resize"]["metrics"]["max_abs"]["worst"] <= 2
    figures = report["task_figures"]
    assert figures["images"] == 3 and figures["mean_iou"] > 0.95 and figures["mean_boundary_f"] > 0.95
    # the postprocessing step alone on the reference's map makes the reference's matte and mask exactly
    assert stages["postprocess"]["isolated_verdict"] == "equal"
    with (tmp_path / "per_image.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"postprocess_verdict", "iou", "dice", "boundary_f", "matte_mae", "flipped"} <= set(rows[0])
    assert all(float(r["iou"]) > 0.9 for r in rows)


EDGE_PHOTOS = ("ants/161076144_124db762d6.jpg", "ants/181942028_961261ef48.jpg")
"""Hymenoptera photos whose 2-pixel frame fn.resize's own edges moved by 16 and 18 levels (0.14% and
0.11% of the values beyond 4 levels: the resize diverged, and the check failed)."""


def test_photos_whose_edge_dali_resized_its_own_way_pass(segmentation_server, tmp_path):
    from tests.segmentation.conftest import HYMENOPTERA

    images = tmp_path / "images"
    images.mkdir()
    for name in EDGE_PHOTOS:
        (images / name.replace("/", "_")).write_bytes((HYMENOPTERA / name).read_bytes())
    result, report = check(segmentation_server, images, tmp_path / "check")
    assert result.returncode == 0, result.stdout + result.stderr
    resize = {s["name"]: s for s in report["stages"]}["resize"]
    assert resize["verdict"] == "close" and resize["metrics"]["max_abs"]["worst"] <= 2, resize


def test_the_cpu_twin_replays_rembg_exactly(segmentation_server, segmentation_photos, tmp_path):
    result, report = check(segmentation_server, segmentation_photos, tmp_path, "--pipeline", "opencv")
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = {s["name"]: s["verdict"] for s in report["stages"]}
    assert verdicts["decode"] == verdicts["resize"] == "equal" and verdicts["postprocess"] in ("equal", "close")
    assert report["task_figures"]["mean_iou"] > 0.999


PLANTED = [
    # (spec, first divergent stage, the culprit diagnose names; None: named by the two-at-once test below)
    ("linear.toml", "resize", None),
    ("normalization_range.toml", "input", "normalization divisor"),  # the dimmed photo's: its maximum is 150
    ("channel_order.toml", "input", "channel order"),
    ("threshold_before.toml", "postprocess", None),  # the result step's own
]


@pytest.mark.parametrize("planted, stage, culprit", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_cause_fails_at_its_stage_and_diagnose_names_it(segmentation_server, segmentation_photos, diagnosed,
                                                                   tmp_path, planted, stage, culprit):
    spec = PLANTED_DIR / planted
    drawn = planted == "linear.toml"  # one report.html: the worst photos with both masks' contours
    result, report = check(segmentation_server, segmentation_photos, tmp_path / "check", "--spec", spec, html=drawn)
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["first_divergent_stage"] == stage
    assert {s["name"]: s["verdict"] for s in report["stages"]}["postprocess"] == "diverged"
    if drawn:
        page = (tmp_path / "check" / "report.html").read_text()
        assert page.count("mask contours, flipped pixels (purple)") >= 1 and "data:image/png;base64," in page
    if culprit is None:
        return
    diagnosis = harness("diagnose", diagnosed, "--task", "segmentation", "--url", segmentation_server.grpc_url,
                        "--spec", spec, "--report", tmp_path / "diagnose", timeout=900)
    found = json.loads((tmp_path / "diagnose" / "diagnosis.json").read_text())
    assert [c["culprit"] for c in found["causes"]] == [culprit], diagnosis.stdout + diagnosis.stderr


def test_two_planted_causes_are_named_in_one_diagnosis(segmentation_server, diagnosed, tmp_path):
    spec = PLANTED_DIR / "linear+threshold_before.toml"
    diagnosis = harness("diagnose", diagnosed, "--task", "segmentation", "--url", segmentation_server.grpc_url,
                        "--spec", spec, "--report", tmp_path, timeout=900)
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    causes = [c["culprit"] for c in found["causes"]]
    assert sorted(causes) == ["resize interpolation", "threshold before or after upsampling"], diagnosis.stdout


def test_a_single_pixel_a_strip_and_a_flat_photo_are_each_compared(segmentation_server, segmentation_photos, tmp_path):
    """Made from a real photo: its 1x1 average, a 4-pixel strip of it, and its flat mean colour
    (nothing salient). Each is compared at its own size; the flat one's masks are both empty
    (agreement); the strip is enlarged 80 times (PIL's edges replayed at both its long edges)."""
    import cv2
    import numpy as np

    photo = cv2.imread(str(segmentation_photos / "n02328150_Angora.JPEG"))
    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "one_pixel.png"), cv2.resize(photo, (1, 1), interpolation=cv2.INTER_AREA))
    cv2.imwrite(str(images / "strip.jpg"), photo[100:104])
    cv2.imwrite(str(images / "flat.png"), np.full_like(photo, photo.mean(axis=(0, 1)).astype(np.uint8)))
    result, report = check(segmentation_server, images, tmp_path / "check")
    assert report["compared"] == 3 and not report["failed"], result.stdout + result.stderr
    with (tmp_path / "check" / "per_image.csv").open() as f:
        rows = {r["image"]: r for r in csv.DictReader(f)}
    for name in ("one_pixel.png", "flat.png"):
        assert rows[name]["postprocess_verdict"] in ("equal", "close") and float(rows[name]["iou"]) == 1.0
    assert rows["strip.jpg"]["postprocess_verdict"] in ("close", "tie", "diverged") and float(rows["strip.jpg"]["iou"]) > 0.9


def test_the_served_postprocessing_refuses_a_nan_map_for_its_request_only(segmentation_server):
    import numpy as np
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(segmentation_server.grpc_url)
    bad = np.zeros((1, 1, 320, 320), np.float32)
    bad[0, 0, 7, 7] = np.nan

    def infer(saliency):
        inputs = [grpc.InferInput("MAP", list(saliency.shape), "FP32"), grpc.InferInput("GEOMETRY", [1, 8], "INT32")]
        inputs[0].set_data_from_numpy(saliency)
        inputs[1].set_data_from_numpy(np.array([[30, 40, 320, 320, 0, 0, 0, 0]], np.int32))
        return client.infer("segment_postprocess", inputs)

    with pytest.raises(Exception, match="non-finite"):
        infer(bad)
    good = infer(np.full((1, 1, 320, 320), 0.25, np.float32))
    assert good.as_numpy("MASK").shape == (1, 30, 40) and not good.as_numpy("MASK").any()


def test_the_sweep_verifies_every_mask_and_reports_the_wrong_ones(segmentation_server, segmentation_photos, tmp_path):
    """Every answer of segment_dali under load judged against its photo's mask alone (verified, none
    wrong); a model answering every second request's mask inverted: its wrong masks reported."""
    run = sweep(*against(segmentation_server), "--model", "segment_dali", "--model", WRONG_MASKS, "--clients", 1,
                "--protocols", "grpc", "--warmup", "1", "--duration", "3", "--images", segmentation_photos,
                "--report", tmp_path, timeout=300)
    assert run.returncode == 1, run.stderr  # the wrong masks fail the sweep
    stats = {p["ensemble"]: p["stats"] for p in json.loads((tmp_path / "results.json").read_text())["points"]}
    for model, wrong in (("segment_dali", False), (WRONG_MASKS, True)):
        s = stats[model]
        assert s["requests"] > 0 and s["verified"] == s["requests"] and s["unverified"] == 0, (model, s)
        assert (s["wrong_answers"] > 0) is wrong and s["errors"] == ({WRONG_ANSWER: s["wrong_answers"]} if wrong else {})
    assert f"{WRONG_MASKS} x1: {stats[WRONG_MASKS]['wrong_answers']} wrong answers of" in run.stderr


def test_the_watch_judges_the_masks(segmentation_server, segmentation_photos, tmp_path):
    """`harness watch --once` on the planted model (segment_dali's own agreement is the sweep's and
    the OCR watch's): its inverted masks are wrong answers, the agreement below 1, the round fails."""
    watch = harness("watch", "--url", segmentation_server.grpc_url, "--once", "--known-answers", tmp_path,
                    "--images", segmentation_photos, "--model", WRONG_MASKS, "--photo-count", 3)  # odd: every second
    assert watch.returncode == 1, watch.stderr
    rows = {(r[0].strip(), r[1].strip()): r for r in (line.split("|")[1:-1] for line in watch.stdout.splitlines()[2:])}
    _, _, probes, agreement, wrong, failed, _ = rows[WRONG_MASKS, "alone"]
    assert int(probes) == 3 and int(failed) == 0 and int(wrong) > 0 and float(agreement) < 1.0
    assert "pixels flipped" in watch.stderr  # the wrong answer's detail, logged


def test_the_ensemble_read_as_any_deployment_checks_alike(segmentation_server, segmentation_photos, tmp_path):
    """``--model segment_dali``: discovered from the server (its map and its matte and mask by
    name), replayed step by step, and checked like the repository's pipeline."""
    result, report = check(segmentation_server, segmentation_photos, tmp_path, "--model", "segment_dali")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result answered by segment_dali: a matte MATTE and a mask MASK" in result.stdout
    stages = {s["name"]: s["verdict"] for s in report["stages"]}
    assert stages["output"] in ("equal", "close") and stages["postprocess"] in ("equal", "close")
    assert report["task_figures"]["mean_iou"] > 0.95


def test_preflight_records_the_masks_and_holds_the_server_to_them(segmentation_server, photos_dir, tmp_path):
    """The known answers keep both ensembles' matte, mask and geometry of the segmentation photos;
    ``preflight --task segmentation`` compares a server's with them by the task's rule: the same
    server passes, a record whose mask was changed fails naming the photo."""
    import numpy as np

    from harness.client import TritonClient
    from harness.preflight import FAIL, PASS, known_result_rows
    from harness.preflight.known_answers import load, read_photos, record, serves
    from harness.task import get_task

    task = get_task("segmentation")
    photos = task.known_results.photos
    with TritonClient(segmentation_server.grpc_url, "grpc") as client:
        assert serves(client, task.known_results)
        record(client, {}, tmp_path, {}, result_images={"segmentation": read_photos(photos_dir, photos)})
        known = load(tmp_path)
        assert set(known.results["segmentation"]) == set(photos)
        rows = known_result_rows(client, known, task, PROJECT_ROOT / "model_repository")
        assert [r.status for r in rows] == [PASS, PASS], rows
        photo = photos[0]
        mask = known.results["segmentation"][photo]["dali"]["MASK"]
        known.results["segmentation"][photo]["dali"]["MASK"] = np.ones_like(mask) - mask  # every pixel flipped
        rows = known_result_rows(client, known, task, PROJECT_ROOT / "model_repository")
    assert [r.status for r in rows] == [FAIL, PASS] and photo in rows[0].detail
