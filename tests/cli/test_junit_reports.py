"""``--format junit`` on every job, against the real embedded server and real photos, read back
by junitparser as a CI's test tab reads it: the cases each job decided, and a failing case's
message the one line a person needs. Cheap settings: three images (two photos and a 1-bit
TIFF, which OpenCV reads and the deployed DALI decoder refuses: a real one-sided rejection).

check runs as the CI example runs it (a subprocess); the others in-process (``harness.cli.main``)
to spare a process start each; the sweep as ``python -m loadtest.sweep``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest

from harness.cli import main
from tests.commands import harness
from tests.conftest import copy_photos

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg")
ONE_SIDED = "sampled_3x1.jpg"  # the deployment alone refuses it (tests/test_rejections.py)


def suite(path: Path) -> junitparser.TestSuite:
    """The one test suite of a JUnit file, as junitparser reads it."""
    suites = list(junitparser.JUnitXml.fromfile(str(path)))
    assert len(suites) == 1, suites
    return suites[0]


def cases(path: Path) -> dict[tuple[str, str], tuple[str, str | None]]:
    """(classname, name) -> (passed / failed / error / skipped, message) of every case."""
    out = {}
    for case in suite(path):
        kind, message = "passed", None
        for item in case.result:
            kind = {junitparser.Failure: "failed", junitparser.Error: "error", junitparser.Skipped: "skipped"}[type(item)]
            message = item.message
        out[(case.classname, case.name)] = (kind, message)
    return out


def failing(found: dict) -> dict:
    return {key: message for key, (kind, message) in found.items() if kind in ("failed", "error")}


def properties(path: Path) -> dict[str, str]:
    return {p.name: p.value for p in suite(path).properties()}


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    from tests.attack_files import jpeg_grey_sampled

    directory = copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))
    (directory / ONE_SIDED).write_bytes(jpeg_grey_sampled(320, 240, 0x31))
    return directory


@pytest.fixture(scope="module")
def misaligned_run(server, images, repository, tmp_path_factory):
    """A check of a real misalignment (training resized with antialias, the deployment without),
    as the CI gate runs it: junit and html, tensors saved for ``compare``."""
    report = tmp_path_factory.mktemp("misaligned")
    run = harness("check", images, "--url", server.grpc_url, "--spec", repository.parent / "specs" / "misaligned_resize.toml",
                  "--reference-model", "onnx", "--no-isolate", "--save-tensors", "--format", "junit,html",
                  "--report", report)
    return run, report


def test_check_gate_writes_junit_and_html_and_fails_with_the_reason(misaligned_run):
    run, report = misaligned_run
    assert run.returncode == 1, run.stderr
    found = cases(report / "report.junit.xml")
    stages = [name for (group, name) in found if group == "check.classify_dali"]
    assert stages == ["decode", "resize", "crop", "input", "output", "topk"]
    assert found[("check.classify_dali", "decode")] == ("passed", None)
    kind, message = found[("check.classify_dali", "resize")]
    assert kind == "failed" and message.startswith("diverged (") and "max abs err" in message and "\n" not in message
    kind, message = found[("check.classify_dali.rejected by deployment", ONE_SIDED)]
    assert kind == "failed" and message.startswith("rejected by deployment: deployed: ")
    assert properties(report / "report.junit.xml") == {"job": "check", "verdict": "diverged", "passed": "false"}
    # what --format chose, and the run's records; not report.md, whose text is still printed
    assert (report / "report.html").read_text().startswith("<!doctype html>")
    assert {p.name for p in report.iterdir() if p.is_file()} >= {"report.junit.xml", "report.html", "report.json",
                                                                 "per_image.csv", "images.jsonl", "run.json"}
    assert not (report / "report.md").exists() and "**First divergent stage: resize**" in run.stdout
    assert f"reports: {report / 'report.json'}" in " ".join(run.stderr.split())


def test_merge_and_compare(server, photos_dir, misaligned_run, tmp_path, capsys):
    photos = copy_photos(photos_dir, PHOTOS, tmp_path / "photos")
    shards = [tmp_path / f"shard{k}" for k in range(2)]
    for k, shard in enumerate(shards):
        assert main(["check", str(photos), "--url", server.grpc_url, "--reference-model", "onnx", "--no-isolate",
                     "--save-tensors", "--shard", f"{k}/2", "--report", str(shard), "--format", "junit"]) == 0
    assert not (shards[0] / "report.md").exists() and (shards[0] / "report.junit.xml").is_file()
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, shards), "--report", str(merged), "--format", "junit,md"]) == 0
    found = cases(merged / "report.junit.xml")
    assert [name for (group, name) in found] == ["decode", "resize", "crop", "input", "output", "topk"]
    assert not failing(found) and suite(merged / "report.junit.xml").tests == 6
    assert (merged / "report.md").is_file() and not (merged / "report.html").exists()
    # compare: the misaligned run's reference side against an aligned shard's, on the images both have
    _, misaligned = misaligned_run
    aligned = next(s for s in shards if any(p.name.startswith(PHOTOS) for p in (s / "tensors").glob("*.npz")))
    compared = tmp_path / "compared"
    capsys.readouterr()
    assert main(["compare", str(misaligned), str(aligned), "--side", "reference", "--report", str(compared),
                 "--format", "junit"]) == 1
    found = cases(compared / "report.junit.xml")
    kind, message = found[("compare.reference", "resize")]
    assert kind == "failed" and message.startswith("diverged (")
    assert found[("compare.reference", "decode")][0] == "passed"
    assert properties(compared / "report.junit.xml")["job"] == "compare"
    assert sorted(p.name for p in compared.iterdir()) == ["report.junit.xml"]


def test_diagnose_cases_are_its_hypotheses(server, images, repository, tmp_path):
    report = tmp_path / "r"
    status = main(["diagnose", str(images), "--spec", str(repository.parent / "specs" / "planted" / "channel_order.toml"),
                   "--url", server.grpc_url, "--reference-model", "onnx", "--report", str(report), "--format", "junit"])
    assert status == 1  # the cause is found; the TIFF only the deployment refuses fails the run
    found = cases(report / "diagnosis.junit.xml")
    assert found[("diagnose", "divergence explained")] == ("passed", None)
    kind, _ = found[("diagnose.round1", "channel order RGB")]
    round1 = suite(report / "diagnosis.junit.xml")
    chosen = next(c for c in round1 if c.classname == "diagnose.round1" and c.name == "channel order RGB")
    assert kind == "passed" and chosen.system_out.startswith("explains `input`, kept")
    assert sum(group == "diagnose.round1" for group, _ in found) > 5  # every hypothesis of the round
    assert list(failing(found)) == [("diagnose", "check's verdict"), ("diagnose.rejected by deployment", ONE_SIDED)]
    assert properties(report / "diagnosis.junit.xml")["verdict"] == "rejected"
    assert sorted(p.name for p in report.iterdir()) == ["diagnosis.junit.xml"]


def test_accuracy_cases_are_the_deployed_paths(server, images, tmp_path):
    report = tmp_path / "r"
    assert main(["accuracy", str(images), "--url", server.grpc_url, "--reference-model", "onnx", "--pipeline", "dali",
                 "--report", str(report), "--format", "junit,html"]) == 1
    found = cases(report / "accuracy.junit.xml")
    assert found[("accuracy.top-1", "classify_dali")][0] == "passed"
    assert list(failing(found)) == [("accuracy.rejected by deployment", ONE_SIDED)]
    assert found[("accuracy.rejected by deployment", ONE_SIDED)][1].startswith("rejected by deployment: dali: ")
    # accuracy.json is the run's record (merge reads a shard's); the page is the registry's
    assert sorted(p.name for p in report.iterdir()) == ["accuracy.html", "accuracy.json", "accuracy.junit.xml"]


def test_layers_cases_are_the_execution_pairs(images, tmp_path, capsys):
    report = tmp_path / "r"
    # float32 rounding between PyTorch and ONNX Runtime (~1e-6) is beyond a tolerance of 1e-12
    assert main(["layers", str(images), "--executions", "torch,onnx", "--limit", "1", "--rel-rms", "1e-12",
                 "--report", str(report), "--format", "junit"]) == 1
    found = cases(report / "layers.junit.xml")
    [(key, (kind, message))] = found.items()
    assert key[1] == "onnx vs torch" and kind == "failed"
    assert message.startswith("onnx vs torch: first divergent layer /") and "; after it the error " in message
    assert sorted(p.name for p in report.iterdir()) == ["layers.junit.xml", "layers.png"]  # the plot with every run


def test_repeat_cases_are_model_and_stage(server, images, tmp_path, capsys):
    report = tmp_path / "r"
    assert main(["repeat", str(images), "--url", server.grpc_url, "--limit", "1", "--repeats", "1", "--batch-sizes", "2",
                 "--concurrency", "2", "--report", str(report), "--format", "junit"]) == 0
    found = cases(report / "repeat.junit.xml")
    assert ("repeat.classify_dali", "output") in found and ("repeat.preprocess_dali_taps", "decode") in found
    assert not failing(found) and all(kind == "passed" for kind, _ in found.values())
    assert properties(report / "repeat.junit.xml") == {"job": "repeat", "verdict": "equal", "passed": "true"}


def test_preflight_cases_are_its_rows(server, tmp_path):
    rows = tmp_path / "out" / "preflight.json"
    run = subprocess.run([sys.executable, "-m", "harness.preflight", "--url", server.url("grpc"), "--known-answers",
                          tmp_path / "none", "--report", rows, "--format", "junit,json"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 1, run.stdout + run.stderr
    found = cases(tmp_path / "out" / "preflight.junit.xml")
    assert found[("preflight.cpu", "models ready")][0] == "passed"
    kind, message = found[("preflight.cpu", "known answers")]
    assert kind == "failed" and "\n" not in message and message
    assert any(kind == "skipped" for kind, _ in found.values())  # outside the server's image: versions not checked
    assert len(json.loads(rows.read_text())) == len(found)  # the rows, as --report always wrote them


def test_loadtest_cases_are_its_points(server, tmp_path):
    out = tmp_path / "sweep"
    run = subprocess.run([sys.executable, "-m", "loadtest.sweep", "--url", server.grpc_url, "--protocol", "grpc",
                          "--http-port", str(server.http_port), "--metrics-url", server.metrics_url, "--model",
                          "classify_dali", "--clients", "1", "--protocols", "grpc", "--warmup", "0", "--duration", "1",
                          "--report", out, "--format", "junit"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    found = cases(out / "loadtest.junit.xml")
    kind, _ = found[("loadtest.grpc", "classify_dali x1")]
    assert kind == "passed" and suite(out / "loadtest.junit.xml").name == "Load test: classify_dali"
    (point,) = suite(out / "loadtest.junit.xml")
    assert " QPS, TP50 " in point.system_out and point.time > 0
    assert {p.name for p in out.iterdir() if p.is_file()} == {"loadtest.junit.xml", "throughput.png", "latency.png"}
