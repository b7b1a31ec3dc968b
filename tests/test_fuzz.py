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

from harness.client import TritonClient

# Hostile files (decompression bombs, huge and truncated images) are checked in a process of their
# own, as a user runs them: its memory and a crash stay out of the test process.
from tests.commands import harness_process as harness
from tests.conftest import copy_photos
from tests.fuzz_files import hostile_files

SEED = 20261122
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "grace_hopper.jpg")


TIMEOUT = ("--timeout", "30")


@pytest.fixture(scope="module")
def server(cpu_repository, tmp_path_factory):
    """This module's own server (real tritonserver, loopback, free ports): the classification
    models its commands read."""
    from harness.server import TritonServer, free_port
    from tests.conftest import CLASSIFY_MODELS

    log = tmp_path_factory.mktemp("fuzz-server") / "tritonserver.log"
    with TritonServer(cpu_repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      log_file=log, models=CLASSIFY_MODELS) as triton:
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
    # Half the default budget of images in flight: beside the other worker's servers the default's
    # 3.6 GB peak met the OOM killer once on 24 GB; an image above the budget still runs, alone.
    result = harness("check", mixed, "--url", server.grpc_url, "--report", tmp_path, "--no-isolate", *TIMEOUT,
                     "--memory-budget", "1024",
                     "--retries", "1", html=True, timeout=900)
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


# -- issue 25: hostile names, spec values and options ----------------------------------------------

def test_hostile_names_are_rows_and_every_json_is_strict(server, photos_dir, tmp_path):
    """Seeded hostile names (not UTF-8, 240-255 bytes, controls, mathtext, markup, formulas) on
    photos, hostile bytes, links inside, outside and dangling, FIFOs and folders."""
    from tests.fuzz_files import hostile_folder
    from tests.robust import counts_add_up, csv_rows, strict_json, strict_jsonl

    kinds = hostile_folder(photos_dir, tmp_path / "images", seed=SEED, count=40)
    assert kinds["photo"] >= 10 and len(kinds) >= 5
    result = harness("check", tmp_path / "images", "--url", server.grpc_url, "--report", tmp_path / "r",
                     *TIMEOUT, html=True, timeout=900)
    assert_no_traceback(result)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = strict_json(tmp_path / "r" / "report.json")
    assert counts_add_up(report) == len(os.listdir(tmp_path / "images")) == 40
    assert report["compared"] >= kinds["photo"]
    assert len(strict_jsonl(tmp_path / "r" / "images.jsonl")) == 40 == len(csv_rows(tmp_path / "r" / "per_image.csv")) - 1
    assert (tmp_path / "r" / "report.html").read_text().count("<figure>") >= 3  # the worst images plotted


def fuzz_check(args: list[str]) -> tuple[int, str]:
    """``harness check ARGS`` in this process: (exit status, stderr), every exception a failure."""
    import contextlib
    import io

    from harness.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = main(args)
        except SystemExit as exc:
            status = exc.code
    return status, err.getvalue()


def test_spec_values_and_options_never_raise(server, photos_dir, tmp_path):
    """A time-bounded, seeded campaign: random spec files and random option values on one
    photo; each ends with exit 0, 1 or 2, a refusal in one line, never a traceback or a lost row."""
    import random
    import time

    from tests.fuzz_files import random_options, random_spec
    from tests.robust import counts_add_up, strict_json

    rng, deadline, statuses, spec_statuses = random.Random(SEED), time.monotonic() + 40, {}, {}
    images = copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    (tmp_path / "images" / "bad.jpg").write_bytes(b"not an image")
    (tmp_path / "self.toml").write_text('extends = "self.toml"\n')
    for case in range(1000):
        if time.monotonic() > deadline and case >= 20:
            break
        report = tmp_path / f"r{case}"
        args = ["check", str(images), "--url", server.grpc_url, "--report", str(report), "--timeout", "30"]
        if case % 2 == 0:
            (tmp_path / f"s{case}.toml").write_text(random_spec(rng, tmp_path))
            args += ["--spec", str(tmp_path / f"s{case}.toml"), "--no-isolate"]
        else:
            args += random_options(rng)
        status, err = fuzz_check(args)
        statuses[status] = statuses.get(status, 0) + 1
        if case % 2 == 0:
            spec_statuses[status] = spec_statuses.get(status, 0) + 1
        assert "Traceback" not in err and status in (0, 1, 2), (args, err[-2000:])
        if status == 2 and "error:" in err:
            assert err.strip().splitlines()[-1].startswith("error:"), (args, err[-2000:])
        if (report / "report.json").exists():  # every entry a row; a stopped run says it stopped
            written = strict_json(report / "report.json")
            assert counts_add_up(written) == 2 or written["run"]["stopped_reason"] and status == 2, args
    assert statuses.get(2, 0) and sum(statuses.values()) >= 20
    # A campaign against a dead server would pass on refusals alone: the spec cases (which keep
    # the server's --url) must have compared, and the server must still serve after them all.
    assert spec_statuses.get(0, 0) + spec_statuses.get(1, 0) > 0, spec_statuses
    with TritonClient(server.grpc_url, "grpc") as client:
        assert server.is_running() and client.is_ready(), "the server stopped serving during the campaign"
