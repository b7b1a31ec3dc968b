"""harness/check/rundir.py: a report directory owned by one run, a manifest --resume
verifies, records appended whole and read back whatever a crash left. The units, then the
command as a user runs it against the real server."""

import json
import os
import shlex
import shutil
import subprocess

import pytest

from harness.check.rundir import ResultsLog, RunDirectory, RunManifest
from harness.errors import UsageError
from harness.result import ImageResult
from tests.commands import harness
from tests.conftest import copy_photos
from tests.robust import assert_same_run, counts_add_up, no_traceback, start_harness, strict_json, wait_for_records
from tests.runs import result

PHOTOS = ["baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "squirrel_cls.jpg", "grace_hopper.jpg",
          "starry_night.jpg", "butterfly.jpg", "apple.jpg", "home.jpg"]


def test_a_second_run_into_a_locked_directory_is_refused_naming_the_first(tmp_path):
    holder = subprocess.Popen(["python3", "-c", f"""
import fcntl, os, sys, time
fd = os.open({str(tmp_path / 'run.lock')!r}, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, str(os.getpid()).encode())
print("locked", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=f"in use by another run \\(PID {holder.pid}\\)"):
            with RunDirectory(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with RunDirectory(tmp_path) as run_dir:  # its process gone, the lock is free again
        assert (tmp_path / "run.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(UsageError, match="in use by another run"):
            RunDirectory(tmp_path).__enter__()  # a second writer in the same process too
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        RunDirectory(tmp_path / "file").__enter__()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "visuals").symlink_to(tmp_path)
    with RunDirectory(tmp_path / "d") as run_dir, pytest.raises(UsageError, match="refusing to write through it"):
        run_dir.subdirectory("visuals")


def test_the_manifest_names_every_difference():
    then = RunManifest("check", {"deployment": {"pipeline": "dali", "model": None}, "spec": {"sha256": "a"}, "top_k": 5})
    now = RunManifest("check", {"deployment": {"pipeline": "opencv", "model": None}, "spec": {"sha256": "b"}, "top_k": 5})
    assert then.differences(now) == ['deployment.pipeline: "dali" -> "opencv"', 'spec.sha256: "a" -> "b"']
    assert then.differences(then) == [] and RunManifest.from_dict(json.loads(json.dumps(then.to_dict()))) == then
    served = then.served_by("2.51.0", "dali")
    assert served.differences(then, only_known=True) == [] and served.differences(then) == [
        'served: {"deployment": "dali", "tritonserver": "2.51.0"} -> "(absent)"']


def test_a_torn_last_line_and_duplicates_are_dropped_and_redone(tmp_path):
    log = ResultsLog(tmp_path)
    log.start()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        log.append(result(name))
    log.append(result("a.jpg", resize_error=40))  # a later record of a.jpg: it wins
    log.close()
    with (tmp_path / "images.jsonl").open("ab") as f:
        f.write(b"not json\n")
        f.write(json.dumps(result("d.jpg").to_dict())[:100].encode())  # torn: the disk filled up here
    seen = []
    recovered = ResultsLog(tmp_path).resume(lambda r: r.image != "c.jpg", seen.append)  # c.jpg: gone from the folder
    assert (recovered.kept, recovered.torn, recovered.duplicates, recovered.dropped) == (2, 2, 1, 1)
    assert sorted(r.image for r in seen) == ["a.jpg", "b.jpg"]
    assert next(r for r in seen if r.image == "a.jpg").first_divergent == "resize"
    lines = (tmp_path / "images.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["image"] for line in lines] == [r.image for r in seen]
    assert len((tmp_path / "per_image.csv").read_text().splitlines()) == 3
    assert ImageResult.from_dict(json.loads(lines[0])).stages  # strict JSON ("inf" as a string) reads back


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def uninterrupted(server, images, tmp_path_factory):
    report = tmp_path_factory.mktemp("uninterrupted")
    done = harness("check", images, "--url", server.grpc_url, "--report", report, "--pipeline", "opencv",
                   "--timeout", "60", timeout=900)
    assert done.returncode == 0, done.stderr
    return report


def test_sigint_writes_the_partial_reports_and_the_printed_command_resumes_the_same_run(server, images, uninterrupted,
                                                                                      tmp_path, repository):
    report = tmp_path / "r"
    args = ("check", images, "--url", server.grpc_url, "--report", report, "--pipeline", "opencv", "--timeout", "60",
            "--spec", repository / "preprocessing.toml", "--workers", "1")
    run = start_harness(*args)
    wait_for_records(report, 3, run)
    run.send_signal(2)  # SIGINT
    out, err = run.communicate(timeout=300)
    no_traceback(err)
    assert run.returncode == 2, err
    assert "interrupted by SIGINT" in err and "continue with: harness check" in err
    partial = strict_json(report / "report.json")
    assert 3 <= partial["images"] < len(PHOTOS) and partial["run"]["stopped_reason"] == "interrupted by SIGINT"
    assert "Incomplete run" in (report / "report.md").read_text()
    hint = err.split("continue with: ", 1)[1].strip()
    words = shlex.split(hint)
    for option in ("--url", "--pipeline", "--timeout", "--spec", "--workers", "--resume"):
        assert option in words, hint
    # Resuming another run's directory with other options: refused, naming each difference.
    other = harness("check", images, "--url", server.grpc_url, "--report", report, "--resume", timeout=300)
    assert other.returncode == 2 and "holds another run" in other.stderr
    assert 'deployment.pipeline: "opencv" -> "dali"' in other.stderr and "Traceback" not in other.stderr
    # The printed command, verbatim, in a shell: the same run, finished.
    resumed = subprocess.run(hint.replace("harness check", f"{shlex.quote(os.sys.executable)} -m harness check", 1),
                             shell=True, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(report, uninterrupted)


def test_two_runs_into_one_report_the_second_is_refused(server, images, tmp_path):
    report = tmp_path / "r"
    first = start_harness("check", images, "--url", server.grpc_url, "--report", report, "--workers", "1",
                          "--no-isolate")
    wait_for_records(report, 1, first)
    second = harness("check", images, "--url", server.grpc_url, "--report", report, "--no-isolate")
    assert second.returncode == 2 and f"in use by another run (PID {first.pid})" in second.stderr, second.stderr
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    data = strict_json(report / "report.json")
    assert counts_add_up(data) == data["compared"] == len(PHOTOS)
    assert len((report / "images.jsonl").read_text().splitlines()) == len(PHOTOS)
    assert len((report / "per_image.csv").read_text().splitlines()) == len(PHOTOS) + 1


def test_resume_recovers_a_torn_log_a_deleted_image_and_a_damaged_visual(server, images, uninterrupted, tmp_path):
    report = tmp_path / "r"
    shutil.copytree(uninterrupted, report)
    lines = (report / "images.jsonl").read_bytes().splitlines(keepends=True)
    torn = lines[-1][: len(lines[-1]) // 2]  # the last record torn (a crash, a full disk)
    (report / "images.jsonl").write_bytes(b"".join(lines[:-1] + [lines[0], b"{garbage\n", torn]))
    for visual in list((report / "visuals").iterdir())[:2]:
        visual.write_bytes(visual.read_bytes()[:50])  # truncated .npz files
    resumed = harness("check", images, "--url", server.grpc_url, "--report", report, "--pipeline", "opencv",
                      "--timeout", "60", "--resume", timeout=900)
    no_traceback(resumed.stderr)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 torn or unreadable line(s) dropped; 1 duplicate record(s) dropped" in resumed.stderr
    data = strict_json(report / "report.json")
    assert counts_add_up(data) == data["compared"] == len(PHOTOS)

    fewer = tmp_path / "fewer"
    shutil.copytree(images, fewer)
    (fewer / PHOTOS[0]).unlink()  # a done image deleted before resuming
    (fewer / "new.jpg").write_bytes((images / PHOTOS[1]).read_bytes())
    shutil.copytree(uninterrupted, tmp_path / "r2")
    manifest = json.loads((tmp_path / "r2" / "run.json").read_text())
    manifest["identity"]["images"] = str(fewer.resolve())
    (tmp_path / "r2" / "run.json").write_text(json.dumps(manifest))
    again = harness("check", fewer, "--url", server.grpc_url, "--report", tmp_path / "r2", "--pipeline", "opencv",
                    "--timeout", "60", "--resume", timeout=900)
    assert again.returncode == 0, again.stderr
    assert "1 record(s) of entries no longer listed as they were dropped" in again.stderr
    data = strict_json(tmp_path / "r2" / "report.json")
    assert counts_add_up(data) == data["compared"] == len(PHOTOS)
    names = [json.loads(line)["image"] for line in (tmp_path / "r2" / "images.jsonl").read_text().splitlines()]
    assert sorted(names) == sorted([*PHOTOS[1:], "new.jpg"])
