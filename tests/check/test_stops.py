"""A check stopped from outside (SIGTERM, a killed Triton, a full disk, a read-only folder)
keeps what it did, says how to go on, leaves nothing behind (no build folder, no Python-backend
stub, no shared memory), and --resume finishes the same run. Real servers, real processes."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.paths import BUILD_DIR
from harness.repository import models_of
from harness.server import TritonServer, _shm_segments, free_port, group_members
from tests.commands import harness
from tests.conftest import DALI_CHECK_MODELS, copy_photos
from tests.robust import assert_same_run, counts_add_up, no_traceback, start_harness, strict_json, wait_for_records

PHOTOS = ["baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "squirrel_cls.jpg", "grace_hopper.jpg",
          "starry_night.jpg", "butterfly.jpg"]


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


def _name(process: psutil.Process) -> str | None:
    try:
        return process.name()
    except psutil.NoSuchProcess:  # a short-lived child, gone between the listing and the reading
        return None


def _tritonserver_of(process: subprocess.Popen, timeout: float = 300) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [c for c in psutil.Process(process.pid).children(recursive=True) if _name(c) == "tritonserver"]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError("no tritonserver started")


def _wait_gone(pgid: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return group_members(pgid)


def _hint(stderr: str) -> str:
    assert "continue with: " in stderr, stderr[-2000:]
    return stderr.split("continue with: ", 1)[1].strip().replace(
        "harness check", f"{shlex.quote(sys.executable)} -m harness check", 1)


@pytest.mark.server  # starts its own tritonserver
def test_sigterm_on_an_embedded_run_writes_its_reports_and_leaves_nothing(images, tmp_path):
    before = set(BUILD_DIR.glob("embedded-*"))
    report = tmp_path / "r"
    run = start_harness("check", images, "--report", report, "--workers", "1", "--no-isolate")
    triton = _tritonserver_of(run)
    wait_for_records(report, 2, run, timeout=600)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=300)
    no_traceback(err)
    assert run.returncode == 2 and "interrupted by SIGTERM" in err, err[-2000:]
    assert "--resume" in _hint(err) and "--url" not in _hint(err)  # it resumes on an embedded server too
    partial = strict_json(report / "report.json")
    assert 2 <= partial["images"] < len(PHOTOS) and "Incomplete run" in (report / "report.md").read_text()
    assert set(BUILD_DIR.glob("embedded-*")) == before  # the embedded server's folder is gone
    assert _wait_gone(triton.pid) == []  # tritonserver and its stubs


@pytest.mark.server  # starts its own tritonserver
def test_sigterm_while_the_embedded_server_starts_leaves_nothing(images, tmp_path):
    before = set(BUILD_DIR.glob("embedded-*"))
    run = start_harness("check", images, "--report", tmp_path / "r")
    triton = _tritonserver_of(run)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    no_traceback(err)
    assert run.returncode == 2 and "interrupted" in err
    assert set(BUILD_DIR.glob("embedded-*")) == before
    assert _wait_gone(triton.pid) == []


def test_a_killed_triton_stops_the_run_its_stubs_are_reaped_and_resume_finishes(cpu_repository, images, tmp_path):
    ports = dict(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    server = TritonServer(cpu_repository, log_file=tmp_path / "t1.log", models=DALI_CHECK_MODELS, **ports).start()
    try:
        whole = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "whole", timeout=900)
        assert whole.returncode == 0, whole.stderr
        stubs = group_members(server.process.pid)
        segments = _shm_segments(stubs)
        assert len(stubs) >= 5 and segments  # the Python-backend models' stubs and their shared memory
        report = tmp_path / "r"
        run = start_harness("check", images, "--url", server.grpc_url, "--report", report, "--workers", "1",
                            "--retries", "1")
        wait_for_records(report, 3, run)
        os.kill(server.process.pid, signal.SIGKILL)
        _, err = run.communicate(timeout=300)
    finally:
        server.stop()  # reaps what the killed server left of its process group
    no_traceback(err)
    assert run.returncode == 2 and "stopped answering" in err, err[-2000:]
    assert group_members(server.process.pid) == [] and not [s for s in segments if os.path.exists(s)]
    assert 3 <= strict_json(report / "report.json")["images"] < len(PHOTOS)
    with TritonServer(cpu_repository, log_file=tmp_path / "t2.log", models=DALI_CHECK_MODELS, **ports):
        resumed = subprocess.run(_hint(err), shell=True, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(report, tmp_path / "whole")


def served_alone(repository, models, out):
    """``out``: a repository of ``models`` of ``repository`` and the models their ensembles run
    (links), beside its files (the specs the models read)."""
    out.mkdir()
    for path in repository.iterdir():
        if path.is_file():
            (out / path.name).symlink_to(path)
    for name in models_of(repository, models):
        (out / name).symlink_to(repository / name)
    return out


def test_serve_exits_when_triton_dies_and_reaps_its_stubs(cpu_repository, tmp_path):
    # the DALI check's models (Python-backend stubs and their shared memory), not the repository's
    # every model: serving them all costs about 20 s more, of loading alone
    repository = served_alone(cpu_repository, DALI_CHECK_MODELS, tmp_path / "repository")
    serve = subprocess.Popen([sys.executable, "-m", "harness", "serve", "--profile", "as-is", "--repository",
                              str(repository), "--http-port", str(free_port()), "--grpc-port", str(free_port()),
                              "--metrics-port", str(free_port()), "--log-file", str(tmp_path / "t.log")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while "Ctrl-C to stop" not in serve.stderr.readline():  # served: every model loaded
            assert serve.poll() is None, serve.stderr.read()
        triton = _tritonserver_of(serve)
        segments = _shm_segments(group_members(triton.pid))
        assert segments
        triton.kill()
        _, err = serve.communicate(timeout=120)
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode == 2 and "tritonserver exited unexpectedly" in err, err[-2000:]
    assert _wait_gone(triton.pid, timeout=5) == [] and not [s for s in segments if os.path.exists(s)]


FULL_DISK = """
set -u
mount -t tmpfs -o size={size} tmpfs {mnt}
{harness} check {images} --url {url} --report {mnt}/r --save-tensors > {out}/full.out 2> {out}/full.err
echo $? > {out}/full.rc
wc -l < {mnt}/r/images.jsonl > {out}/records
mount -o remount,size=256m {mnt}
sed -n 's|.*continue with: harness check|{harness} check|p' {out}/full.err > {out}/hint.sh
bash {out}/hint.sh > {out}/resumed.out 2> {out}/resumed.err
echo $? > {out}/resumed.rc
cp -r {mnt}/r {out}/r
mount -o remount,ro {mnt}
{harness} check {images} --url {url} --report {mnt}/readonly > {out}/ro.out 2> {out}/ro.err
echo $? > {out}/ro.rc
umount {mnt}
"""


def test_a_full_disk_stops_the_run_and_resume_finishes_it(server, images, tmp_path):
    """A 6 MiB tmpfs (a mount namespace of the test's own: `unshare -m`) fills up after an
    image or two with --save-tensors; the records written are kept, the run exits 2 in one
    line; given room, the printed command finishes the same run. Then read-only: refused."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m is refused): a small tmpfs cannot be mounted")
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    script = FULL_DISK.format(size="6m", mnt=mnt, out=out, images=images, url=server.grpc_url,
                              harness=f"{shlex.quote(sys.executable)} -m harness")
    subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script], timeout=1800, check=True)
    full_err = (out / "full.err").read_text()
    no_traceback(full_err, (out / "resumed.err").read_text(), (out / "ro.err").read_text())
    assert (out / "full.rc").read_text().strip() == "2" and "No space left on device" in full_err
    assert 1 <= int((out / "records").read_text()) < len(PHOTOS)  # it stopped mid-run
    assert full_err.strip().splitlines()[-1].startswith("error: "), full_err
    assert (out / "resumed.rc").read_text().strip() == "0", (out / "resumed.err").read_text()[-2000:]
    whole = tmp_path / "whole"
    assert harness("check", images, "--url", server.grpc_url, "--report", whole, "--save-tensors",
                   timeout=900).returncode == 0
    assert_same_run(out / "r", whole)
    assert sorted(p.name for p in (out / "r" / "tensors").iterdir()) == sorted(p.name for p in (whole / "tensors").iterdir())
    assert counts_add_up(strict_json(out / "r" / "report.json")) == len(PHOTOS)
    ro_err = (out / "ro.err").read_text()
    assert (out / "ro.rc").read_text().strip() == "2" and "Read-only file system" in ro_err, ro_err


def test_a_second_sigint_still_writes_the_partial_report_and_the_resume_line(server, images, tmp_path):
    """Issue 35: the second Ctrl-C used to raise at once and lose the partial report and the
    resume line; now the images in flight are left out and the rest is written as after one."""
    report = tmp_path / "r"
    run = start_harness("check", images, "--url", server.grpc_url, "--report", report, "--workers", "1",
                        "--no-isolate", "--format", "json")
    wait_for_records(report, 2, run, timeout=600)
    run.send_signal(signal.SIGINT)
    time.sleep(0.02)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=300)
    no_traceback(err)
    assert run.returncode == 2 and ("interrupted twice" in err or "interrupted by SIGINT" in err), err[-2000:]
    assert "--resume" in _hint(err)
    partial = strict_json(report / "report.json")
    assert 2 <= partial["images"] < len(PHOTOS) and partial["run"]["incomplete"]
    done = subprocess.run(_hint(err), shell=True, capture_output=True, text=True, timeout=900)  # as printed
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert counts_add_up(strict_json(report / "report.json")) == len(PHOTOS)
