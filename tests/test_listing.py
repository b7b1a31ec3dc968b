"""harness/listing.py and harness/files.py: which folder entries are inputs, how they are read,
and how reports are written (atomic, never through a link, strict JSON)."""

import json
import os
import threading

import pytest

from harness.files import InputFileError, read_limited, strict_json, write_atomic
from harness.listing import list_inputs, read_input


@pytest.fixture
def folder(tmp_path, photo):
    """Every kind of entry a folder can hold, named as the issue found them."""
    d = tmp_path / "images"
    d.mkdir()
    (d / "photo.jpg").write_bytes(photo("baboon.jpg"))
    (d / os.fsdecode(b"bad\xff\xfename.jpg")).write_bytes(photo("fruits.jpg"))
    (d / ("x" * 246 + ".jpg")).write_bytes(photo("orange.jpg"))  # 250 bytes
    (d / "inside.jpg").symlink_to("photo.jpg")
    (d / "passwd.jpg").symlink_to("/etc/passwd")
    (d / "environ.jpg").symlink_to("/proc/self/environ")
    (d / "dangling.jpg").symlink_to("nowhere.jpg")
    (d / "loop.jpg").symlink_to("loop.jpg")
    (d / "to_folder").symlink_to(tmp_path)
    os.mkfifo(d / "fifo.jpg")
    (d / "sub").mkdir()
    (d / ".hidden.jpg").write_bytes(b"x")
    return d


def test_every_entry_is_an_input_or_a_skipped_row_with_why(folder):
    listing = list_inputs(folder)
    assert listing.entries == len(os.listdir(folder)) == 12
    assert [f.name for f in listing.inputs] == sorted(["photo.jpg", "bad\\xff\\xfename.jpg", "x" * 246 + ".jpg",
                                                       "inside.jpg"], key=lambda n: n.encode())
    reasons = {s.name: s.reason for s in listing.skipped}
    assert reasons["passwd.jpg"].startswith("symbolic link to outside the folder (/etc/passwd; --follow-links")
    assert reasons["environ.jpg"].startswith("symbolic link to outside the folder")
    assert reasons["dangling.jpg"] == "broken symbolic link (to nowhere.jpg)"
    assert reasons["loop.jpg"] == "symbolic link loop"
    assert reasons["fifo.jpg"] == "not a regular file: a FIFO"
    assert reasons["sub"] == "not a regular file: a directory"
    assert reasons[".hidden.jpg"].startswith("hidden")
    assert reasons["to_folder"].startswith("symbolic link to outside")
    followed = list_inputs(folder, follow_links=True)
    assert {"passwd.jpg", "environ.jpg"} <= {f.name for f in followed.inputs}
    assert dict((s.name, s.reason) for s in followed.skipped)["to_folder"] == "symbolic link to a directory"


def test_an_input_is_read_only_as_the_regular_file_it_was_listed_as(folder, photo):
    files = {f.name: f for f in list_inputs(folder).inputs}
    assert read_input(files["inside.jpg"]) == photo("baboon.jpg") == read_input(files["photo.jpg"])
    assert read_input(files["bad\\xff\\xfename.jpg"]) == photo("fruits.jpg")
    # Swapped for a link (or a FIFO) after the listing: refused, never followed or waited on.
    (folder / "photo.jpg").unlink()
    (folder / "photo.jpg").symlink_to("/etc/passwd")
    with pytest.raises(InputFileError, match="a symbolic link"):
        read_input(files["photo.jpg"])
    (folder / "photo.jpg").unlink()
    os.mkfifo(folder / "photo.jpg")
    with pytest.raises(InputFileError, match="not a regular file \\(a FIFO\\)"):
        read_input(files["photo.jpg"])


def test_reads_are_bounded_and_refuse_what_is_not_a_file(tmp_path):
    with pytest.raises(InputFileError, match="not a regular file \\(a character device\\)"):
        read_limited("/dev/zero", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(InputFileError, match="larger than 100 bytes"):
        read_limited(tmp_path / "big", 100)
    assert read_limited(tmp_path / "big", 101) == b"x" * 101
    with pytest.raises(FileNotFoundError):
        read_limited(tmp_path / "missing", 1)


def test_a_report_is_written_atomically_and_never_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "report.md").symlink_to(victim)
    write_atomic(tmp_path / "report.md", "the report")
    assert victim.read_text() == "keep me" and not (tmp_path / "report.md").is_symlink()
    assert (tmp_path / "report.md").read_text() == "the report"
    assert sorted(os.listdir(tmp_path)) == ["report.md", "victim.txt"]  # no temporary file left

    seen, stop = set(), threading.Event()

    def reader():  # a reader never sees half a report
        while not stop.is_set():
            seen.add((tmp_path / "r.txt").read_text() if (tmp_path / "r.txt").exists() else "absent")
    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(200):
        write_atomic(tmp_path / "r.txt", str(i) * 5000)
    stop.set()
    thread.join()
    assert all(text == "absent" or text == text[:len(text) // 5000] * 5000 for text in seen)


def test_json_is_strict_everywhere():
    text = strict_json({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5]})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {"a": "nan", "b": ["inf", "-inf", 1.5]}
