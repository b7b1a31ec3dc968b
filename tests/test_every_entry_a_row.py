"""Every job, every entry a row (issue 35, defect 4): ``diagnose`` lists the folder entries
that are not images (a hidden file, a sub-folder, a link leading out) with why, as ``check``
does, in diagnosis.json and diagnosis.md; before, they appeared in none of its outputs. Real
photos, the real server."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_serving_commands import harness
from tests.conftest import copy_photos
from tests.robust import no_traceback


def test_diagnose_lists_skipped_entries_as_check_does(server, photos_dir, tmp_path):
    images = copy_photos(photos_dir, ["baboon.jpg", "orange.jpg"], tmp_path / "images")
    (images / ".hidden.jpg").write_bytes((photos_dir / "fruits.jpg").read_bytes())
    (images / "sub").mkdir()
    (images / "passwd.jpg").symlink_to("/etc/passwd")
    report = tmp_path / "diagnosis"
    result = harness("diagnose", images, "--url", server.grpc_url, "--report", report, timeout=900)
    no_traceback(result.stdout, result.stderr)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    data = json.loads((report / "diagnosis.json").read_text())
    skipped = {s["image"]: s["reason"] for s in data["skipped"]}
    assert set(skipped) == {".hidden.jpg", "sub", "passwd.jpg"}, skipped
    assert skipped["passwd.jpg"].startswith("symbolic link to outside the folder")
    assert data["images"] == 2 and "root:x:0" not in json.dumps(data)
    markdown = (report / "diagnosis.md").read_text()
    assert "3 entries of the folder are not images and were skipped" in markdown and "`sub`" in markdown


def test_infer_lists_skipped_entries_as_rows(server, photos_dir, tmp_path):
    images = copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    (images / ".hidden.jpg").write_bytes((photos_dir / "fruits.jpg").read_bytes())
    (images / "sub").mkdir()
    result = harness("infer", images, "--url", server.grpc_url, "--protocol", "grpc")
    no_traceback(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr  # skipped entries are rows, not failures
    assert "baboon" in result.stdout
    rows = [line for line in result.stdout.splitlines() if "skipped:" in line]
    assert any(".hidden.jpg" in r for r in rows) and any("sub" in r for r in rows), result.stdout


def test_accuracy_lists_skipped_entries_of_an_image_folder(server, photos_dir, tmp_path):
    dataset = tmp_path / "dataset"
    copy_photos(photos_dir, ["baboon.jpg"], dataset / "baboon")
    copy_photos(photos_dir, ["orange.jpg"], dataset / "orange")
    (dataset / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (dataset / "orange" / ".hidden.jpg").write_bytes((photos_dir / "fruits.jpg").read_bytes())
    (dataset / "orange" / "passwd.jpg").symlink_to("/etc/passwd")
    report = tmp_path / "report"
    result = harness("accuracy", dataset, "--url", server.grpc_url, "--report", report, timeout=600)
    no_traceback(result.stdout, result.stderr)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    data = json.loads((report / "accuracy.json").read_text())
    skipped = {s["image"]: s["reason"] for s in data["dataset"]["skipped"]}
    assert set(skipped) == {".DS_Store", "orange/.hidden.jpg", "orange/passwd.jpg"}, skipped
    assert data["dataset"]["images"] == 2
    assert "## Skipped entries, not images (3)" in (report / "accuracy.md").read_text()


def test_layers_lists_skipped_entries(photos_dir, tmp_path):
    from harness.cli import main

    images = copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    (images / ".hidden.jpg").write_bytes((photos_dir / "fruits.jpg").read_bytes())
    (images / "sub").mkdir()
    report = tmp_path / "layers"
    status = main(["layers", str(images), "--report", str(report), "--executions", "onnx,onnx-noopt"])
    assert status in (0, 1)
    data = json.loads((report / "layers.json").read_text())
    assert {s["image"] for s in data["skipped"]} == {".hidden.jpg", "sub"} and data["images"] == 1
    assert "## Skipped entries (not images)" in (report / "layers.md").read_text()


@pytest.mark.parametrize("job", ["diagnose", "accuracy", "layers"])
def test_a_report_path_that_is_a_file_is_refused_in_one_line(server, photos_dir, tmp_path, capsys, job):
    """Each job takes --report as check does (a locked run directory): a file there is one line,
    status 2, before anything runs (before: a FileExistsError traceback once the work was done)."""
    from harness.cli import main

    images = copy_photos(photos_dir, ["baboon.jpg"], tmp_path / "images")
    taken = tmp_path / "taken.txt"
    taken.write_text("mine\n")
    args = [job, str(images), "--report", str(taken)] + ([] if job == "layers" else ["--url", server.grpc_url])
    status = main(args)
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and "is a file, not a directory" in err, err
    assert taken.read_text() == "mine\n"
