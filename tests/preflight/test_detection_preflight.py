"""harness preflight --task detection against the real embedded server (cpu profile): the
detection models ready, and both detection ensembles' boxes on the recorded photos with
text held to the record by compare_detections; each row fails when what it guards moved."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.client import TritonClient
from harness.manifest import load_manifest
from harness.preflight import FAIL, PASS, known_result_rows, passed, run_checks
from harness.preflight.known_answers import META, load, read_photos, record
from harness.preprocessing.dali_graph import production_arguments
from harness.task import get_task

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
DETECTION = get_task("detection")
DETECTION_PHOTOS = DETECTION.known_results.photos


@pytest.fixture(scope="module")
def known(server, photos_dir, tmp_path_factory):
    """The cpu profile's record, detection answers included, as `make setup` makes it."""
    out = tmp_path_factory.mktemp("known")
    run = subprocess.run([sys.executable, "-m", "harness.preflight", "--url", server.url("grpc"), "--record",
                          "--known-answers", str(out), "--photos", str(photos_dir)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return load(out)


def rows_of(server, known, own=None) -> dict:
    with TritonClient(server.url("grpc"), "grpc") as client:
        return {row.check: row for row in known_result_rows(client, known, DETECTION, REPOSITORY, own)}


def test_the_record_holds_both_ensembles_boxes_of_the_photos_with_text(known, photos_dir):
    assert known.result_images["detection"] == read_photos(photos_dir, DETECTION_PHOTOS)
    for photo in DETECTION_PHOTOS:
        for pipeline in ("dali", "opencv"):
            answer = known.results["detection"][photo][pipeline]
            assert len(answer["SCORES"]) >= 3 and answer["BOXES"].shape == (len(answer["SCORES"]), 4, 2), photo
            assert answer["GEOMETRY"].dtype == np.int32 and answer["GEOMETRY"].shape == (8,)
            assert np.all(answer["SCORES"] > 0.6)  # no box near the threshold (0.5) to come and go


@pytest.mark.parametrize("task", ["detection", "ocr"])
def test_preflight_with_the_detection_task_passes_on_the_cpu_profile(server, known, task):
    """The OCR task's deployment (docs/ocr.md) adds the recognizer and the ocr models, its engine,
    and the detection ensembles' boxes it reads."""
    def factory():
        return TritonClient(server.url("grpc"), "grpc")

    with factory() as client:
        rows = run_checks(client, factory, load_manifest(), known, repository=REPOSITORY, in_server_env=True,
                          metrics_url=server.metrics_url, task=task)
    by_name = {row.check: row for row in rows}
    assert passed(rows), [r for r in rows if r.status == FAIL]
    assert by_name["models ready"].expected == f"{8 + len(get_task(task).repository.added)} models"
    for engine in get_task(task).repository.engines:
        assert by_name[f"{engine} platform"].status == PASS and by_name[f"{engine} platform"].found == "python"
    for pipeline in ("dali", "opencv"):
        boxes = by_name[f"detection {pipeline}: boxes"]
        assert boxes.status == PASS and boxes.found == "equal" and boxes.record == "cpu", boxes
        assert by_name[f"detection {pipeline}: geometry"].status == PASS


def test_moved_boxes_or_geometry_fail_their_row(server, known):
    photo = DETECTION_PHOTOS[0]

    def planted(pipeline: str, **changes) -> object:
        detections = {p: {q: dict(a) for q, a in v.items()} for p, v in known.results["detection"].items()}
        detections[photo][pipeline].update(changes)
        return dataclasses.replace(known, results={**known.results, "detection": detections})

    dali = known.results["detection"][photo]["dali"]
    moved = rows_of(server, planted("dali", BOXES=dali["BOXES"] + np.float32(12)))  # every word 12 px off
    assert moved["detection dali: boxes"].status == FAIL and moved["detection dali: boxes"].found == "diverged"
    assert photo in moved["detection dali: boxes"].detail
    assert moved["detection opencv: boxes"].status == PASS  # the other pipeline's record is untouched
    geometry = dali["GEOMETRY"].copy()
    geometry[2:4] //= 2  # a record of a resize to half the size
    resized = rows_of(server, planted("dali", GEOMETRY=geometry))
    assert resized["detection dali: geometry"].status == FAIL and photo in resized["detection dali: geometry"].detail
    lost = rows_of(server, planted("opencv", BOXES=dali["BOXES"][:1], SCORES=dali["SCORES"][:1]))
    assert lost["detection opencv: boxes"].status == FAIL and "extra box" in lost["detection opencv: boxes"].detail


def test_a_record_without_detection_answers_fails_one_row_saying_how_to_make_them(server, known):
    rows = rows_of(server, dataclasses.replace(known, result_images={}, results={}))
    assert list(rows) == ["detection known answers"]
    assert rows["detection known answers"].status == FAIL and "--record" in rows["detection known answers"].detail


def test_a_gpu_hosts_own_record_is_held_to_the_cpu_record(server, known):
    own = dataclasses.replace(known, profile="gpu")
    rows = rows_of(server, known, own=own)
    assert rows["detection dali: boxes"].record == "gpu" and rows["detection dali: boxes"].status == PASS
    assert rows["record detection dali: boxes"].record == "gpu vs cpu"
    assert rows["record detection dali: boxes"].found == "equal"


def test_a_record_made_before_the_detector_loads_without_detection_answers(server, photos_dir, tmp_path):
    with TritonClient(server.url("grpc"), "grpc") as client:
        record(client, read_photos(photos_dir), tmp_path, production_arguments(REPOSITORY))
    old = load(tmp_path)
    assert (tmp_path / META).is_file() and old.result_images == {} and old.results == {}
