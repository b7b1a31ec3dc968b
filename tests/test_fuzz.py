"""The fuzz campaign (issue 10): a few hundred hostile files, seeded, generated from the
corpus photos (tests/fuzz_files.py), through `check`, `infer` on both ensembles and
`accuracy`, as a user runs them, against a real server of its own (so that a file which
crashes a model cannot break the other tests' session server). No traceback; every file
in is a file reported (compared + failed + rejected); the server still ready and right
after. Requests time out after 30 s and are retried once: a model that stopped answering
shows as exit 2 ("stopped answering") in seconds, not hours."""

import json
import os
import subprocess
import sys

import pytest

from tests.cli.test_serving_commands import harness
from tests.conftest import copy_photos
from tests.fuzz_files import hostile_files

SEED = 20261122
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "grace_hopper.jpg")


TIMEOUT = ("--timeout", "30")


@pytest.fixture(scope="module")
def server(cpu_repository, tmp_path_factory):
    """This module's own server (real tritonserver, loopback, free ports)."""
    from harness.server import TritonServer, free_port

    log = tmp_path_factory.mktemp("fuzz-server") / "tritonserver.log"
    with TritonServer(cpu_repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      log_file=log) as triton:
        yield triton


@pytest.fixture(scope="module")
def hostile(photos_dir, tmp_path_factory):
    return hostile_files(photos_dir, tmp_path_factory.mktemp("hostile"), seed=SEED)


@pytest.fixture(scope="module")
def mixed(photos_dir, hostile, tmp_path_factory):
    """The hostile files beside real photos."""
    directory = copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("mixed"))
    for path in hostile:
        os.link(path, directory / path.name)
    return directory


def test_the_campaign_is_reproducible_and_sized(photos_dir, hostile, tmp_path):
    again = hostile_files(photos_dir, tmp_path, seed=SEED)
    assert [p.name for p in again] == [p.name for p in hostile] and 200 <= len(hostile) <= 400
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(again, hostile))
    kinds = {p.name.split("_")[0] for p in hostile}
    assert {"trunc", "hdrflip", "scanflip", "sof", "png", "webp", "bmp", "tiff", "empty.jpg", "huge.jpg"} <= kinds


def assert_no_traceback(result):
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]


def test_check_reports_every_file_and_never_aborts(server, mixed, tmp_path):
    result = harness("check", mixed, "--url", server.grpc_url, "--report", tmp_path, "--no-isolate", *TIMEOUT,
                     "--retries", "1", timeout=900)
    assert_no_traceback(result)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    files = len(os.listdir(mixed))
    rejected = sum(len(r) for r in report["rejected"].values())
    assert report["images"] == files == report["compared"] + len(report["failed"]) + rejected
    assert report["compared"] >= len(PHOTOS) and len(report["failed"]) > 100
    reasons = {f["image"]: f["reason"] for f in report["failed"]}
    assert "image too large" in reasons[next(n for n in reasons if "65500x65500" in n)]  # the bomb: a row
    assert all("\n" not in r for r in reasons.values())  # one line each
    assert (tmp_path / "report.html").stat().st_size > 0 and (tmp_path / "report.md").read_text().strip()
    with (tmp_path / "per_image.csv").open() as f:
        assert sum(1 for _ in f) == files + 1


def test_only_hostile_files_compare_nothing_and_exit_2(server, hostile, tmp_path):
    undecodable = [p for p in hostile if p.name in ("empty.jpg", "text.jpg", "zeros.jpg", "random.jpg",
                                                    "jpeg_magic_only.jpg") or "_0x" in p.name]
    directory = tmp_path / "bad"
    directory.mkdir()
    for path in undecodable:
        os.link(path, directory / path.name)
    result = harness("check", directory, "--url", server.grpc_url, "--report", tmp_path / "r", "--no-isolate",
                     *TIMEOUT)
    assert_no_traceback(result)
    assert result.returncode == 2, result.stderr
    assert "Nothing was compared" in result.stdout and "No stage diverged" not in result.stdout
    assert "none of the" in result.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["compared"] == 0 and len(report["failed"]) == len(undecodable) >= 8


def test_infer_on_both_ensembles_gives_every_file_a_row(server, hostile):
    env = {**os.environ, "COLUMNS": "400"}  # one table row per line
    result = subprocess.run([sys.executable, "-m", "harness", "infer", str(hostile[0].parent), "--pipeline", "both",
                             "--url", server.grpc_url, *TIMEOUT], capture_output=True, text=True, timeout=900, env=env)
    assert_no_traceback(result)
    assert result.returncode == 1, result.stderr[-3000:]  # some files fail
    # A row starts with its file name; a long reason wraps onto lines whose first cell is blank.
    rows = [line for line in result.stdout.splitlines() if line.startswith("│") and line[1:].split("│")[0].strip()]
    assert len(rows) == len(hostile)  # (the header is drawn with ┃)
    assert all(any(f"│ {p.name} " in row for row in rows) for p in hostile)


def test_accuracy_keeps_every_file_and_never_aborts(server, mixed, tmp_path):
    result = harness("accuracy", mixed, "--url", server.grpc_url, "--reference-model", "onnx", "--report", tmp_path,
                     *TIMEOUT, timeout=900)
    assert_no_traceback(result)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    data = json.loads((tmp_path / "accuracy.json").read_text())["dataset"]
    assert data["images"] == len(os.listdir(mixed)) == data["evaluated"] + data["failed"]
    assert data["evaluated"] >= len(PHOTOS)


def test_the_server_is_still_ready_and_right_afterwards(server, photo):
    from harness.client import TritonClient

    with TritonClient(server.grpc_url, "grpc", timeout=30) as client:
        assert client.is_ready()
        for pipeline in ("dali", "opencv"):
            assert client.classify([photo("squirrel_cls.jpg")], pipeline)[0][0].label == "fox squirrel"
            stages = client.stages(photo("squirrel_cls.jpg"), pipeline)  # the taps models too: check reads them
            assert stages["input"].shape == (3, 224, 224)
