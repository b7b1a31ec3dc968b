"""What the harness may replace (harness/written.py), without a server: a folder it wrote, unchanged
and holding nothing else; a failure at any point leaves the old folder as it was."""

import json
import os
import sys

import pytest

from harness.errors import ERROR_STATUS, exit_status_of
from harness.written import RECORD_FILENAME, FolderRefused, replaceable, replacing


def tree(folder):
    return {str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "folder"
            for p in sorted(folder.rglob("*"))}


def written(out, files=None):
    """A folder as the harness writes one: a model's code, a config, a link."""
    with replacing(out, "harness test") as new:
        (new.folder / "model" / "1").mkdir(parents=True)
        (new.folder / "model" / "1" / "model.py").write_text("import numpy\n")
        (new.folder / "model" / "config.pbtxt").write_text(files or 'name: "model"\n')
        (new.folder / "model" / "model.onnx").symlink_to(sys.executable)
    return out


def test_a_folder_it_wrote_is_replaced_whole_and_recorded(tmp_path):
    out = written(tmp_path / "out")
    record = json.loads((out / RECORD_FILENAME).read_text())
    assert record["written_by"] == "harness test" and sorted(record["folders"]) == ["model", "model/1"]
    assert record["links"] == {"model/model.onnx": sys.executable} and len(record["files"]) == 2
    written(out, 'name: "model"\nmax_batch_size: 8\n')
    assert (out / "model" / "config.pbtxt").read_text().endswith("max_batch_size: 8\n")
    assert os.listdir(tmp_path) == ["out"]


def test_a_failure_while_writing_leaves_the_old_folder_byte_identical(tmp_path):
    out = written(tmp_path / "out")
    before = tree(out)
    with pytest.raises(ZeroDivisionError):
        with replacing(out, "harness test") as new:
            (new.folder / "half.txt").write_text("half")
            1 / 0
    assert tree(out) == before and os.listdir(tmp_path) == ["out"]


def test_a_file_added_while_the_new_folder_was_written_keeps_the_old_one(tmp_path):
    """Proven before the block, compared again when it ends: what came in between is not lost."""
    out = written(tmp_path / "out")
    with pytest.raises(FolderRefused, match="changed while the harness was writing"):
        with replacing(out, "harness test") as new:
            (new.folder / "new.txt").write_text("new")
            (out / "NOTES.md").write_text("mine")
    assert (out / "NOTES.md").read_text() == "mine" and (out / "model" / "config.pbtxt").is_file()
    assert os.listdir(tmp_path) == ["out"]


def test_bytecode_of_its_own_code_is_replaceable_other_files_there_are_not(tmp_path):
    """Python compiles a model's code beside it when a server or a pipeline's definition imports it."""
    out = written(tmp_path / "out")
    cache = out / "model" / "1" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\x00")
    assert replaceable(out).entries is not None
    (cache / "notes.txt").write_text("mine")
    with pytest.raises(FolderRefused, match="holds model/1/__pycache__/notes.txt, which the harness did not write"):
        replaceable(out)


@pytest.mark.parametrize("change, named", [
    (lambda out: (out / "model" / "config.pbtxt").write_text("mine"), "model/config.pbtxt changed since harness test"),
    (lambda out: (out / "model" / "1" / "model.py").unlink() or (out / "model" / "1" / "model.py").mkdir(),
     "holds model/1/model.py, which the harness did not write"),
    (lambda out: (out / "model" / "model.onnx").unlink() or (out / "model" / "model.onnx").symlink_to("/etc"),
     "model/model.onnx points elsewhere"),
    (lambda out: os.mkfifo(out / "pipe"), "holds pipe, which the harness did not write"),
    (lambda out: (out / RECORD_FILENAME).write_text('{"files": 3}'), f"its {RECORD_FILENAME} is not a record"),
])
def test_what_changed_since_it_was_written_is_named_and_refused(tmp_path, change, named):
    out = written(tmp_path / "out")
    change(out)
    before = tree(out)
    with pytest.raises(FolderRefused, match=named) as refused:
        written(out)
    assert exit_status_of(refused.value) == ERROR_STATUS and "\n" not in str(refused.value)
    assert tree(out) == before


def test_a_record_naming_the_users_file_with_another_hash_does_not_make_it_replaceable(tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "thesis.tex").write_text("\\chapter{Results}")
    record = {"written_by": "harness deploy", "folders": [], "files": {"thesis.tex": "0" * 64}, "links": {}}
    (out / RECORD_FILENAME).write_text(json.dumps(record))
    with pytest.raises(FolderRefused, match="thesis.tex changed since harness deploy wrote it"):
        written(out)
    assert (out / "thesis.tex").read_text() == "\\chapter{Results}"


def test_an_empty_folder_is_written_a_file_a_loop_of_links_or_a_stale_link_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    written(tmp_path / "empty")
    assert (tmp_path / "empty" / "model" / "config.pbtxt").is_file()
    (tmp_path / "file").write_text("mine")
    with pytest.raises(FolderRefused, match="a file, not a folder"):
        written(tmp_path / "file")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(FolderRefused, match="loop"):
        written(tmp_path / "loop")
    (tmp_path / "stale").symlink_to(tmp_path / "gone" / "deployment")
    with pytest.raises(FolderRefused, match="a symbolic link to .*deployment, which does not exist"):
        written(tmp_path / "stale")
    assert not (tmp_path / "gone").exists()
    assert (tmp_path / "file").read_text() == "mine" and (tmp_path / "loop").is_symlink()


def test_a_folder_inside_one_it_wrote_or_holding_a_protected_one_is_refused(tmp_path):
    out = written(tmp_path / "out")
    with pytest.raises(FolderRefused, match="inside .*out, a folder the harness wrote"):
        written(out / "model" / "inner")
    with pytest.raises(FolderRefused, match="holds .*source, the repository it is built from"):
        replaceable(tmp_path, {tmp_path / "out" / "source": "the repository it is built from"})


def test_the_working_folder_is_not_replaced(tmp_path, monkeypatch):
    """Set aside and removed with the old folder, it would leave the command working nowhere."""
    out = written(tmp_path / "out")
    monkeypatch.chdir(out / "model")
    with pytest.raises(FolderRefused, match="holds the working folder"):
        written(out)
    assert (out / "model" / "config.pbtxt").is_file()
