"""`harness check` on what a careless or hostile folder holds (issue 25), against the real
server: names that are not UTF-8, 250 bytes long, mathtext, HTML, Markdown, Rich markup, a
spreadsheet formula, terminal escapes; links inside and outside, dangling, looping; a FIFO, a
subfolder, a hidden file. Nothing is read from outside the folder, every entry is a row, every
name is shown escaped, and nothing raises."""

import os

import pytest

from tests.commands import harness
from tests.robust import HOSTILE_NAMES, counts_add_up, csv_rows, hostile_folder, no_traceback, strict_json, strict_jsonl

ENTRIES = len(HOSTILE_NAMES) + 8  # the photos, then inside, passwd, environ, dangling, loop, fifo, sub, .hidden


@pytest.fixture(scope="module")
def checked(server, photos_dir, tmp_path_factory):
    images = hostile_folder(photos_dir, tmp_path_factory.mktemp("hostile") / "images")
    report = tmp_path_factory.mktemp("report")
    result = harness("check", images, "--url", server.grpc_url, "--report", report, "--no-isolate", html=True)
    return images, report, result


def test_every_entry_is_a_row_and_nothing_outside_the_folder_is_read(checked):
    images, report, result = checked
    no_traceback(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr[-2000:]
    data = strict_json(report / "report.json")
    assert counts_add_up(data) == len(os.listdir(images)) == ENTRIES
    assert data["compared"] == len(HOSTILE_NAMES) + 1  # and inside.jpg, a link to a photo of the folder
    skipped = {row["image"]: row["reason"] for row in data["skipped"]}
    assert set(skipped) == {"passwd.jpg", "environ.jpg", "dangling.jpg", "loop.jpg", "fifo.jpg", "sub", ".hidden"}
    assert skipped["passwd.jpg"].startswith("symbolic link to outside the folder (/etc/passwd")
    assert skipped["fifo.jpg"] == "not a regular file: a FIFO"
    everything = result.stdout + result.stderr + "".join(p.read_text(errors="replace") for p in report.iterdir()
                                                          if p.is_file())
    assert "root:x:0" not in everything and "PATH=" not in everything  # /etc/passwd, /proc/self/environ
    rows = csv_rows(report / "per_image.csv")
    assert len(rows) == ENTRIES + 1 and {r[1] for r in rows[1:]} == {"compared", "skipped"}
    assert len(strict_jsonl(report / "images.jsonl")) == ENTRIES


def test_every_name_is_escaped_for_its_format(checked):
    images, report, result = checked
    names = {r["image"] for r in strict_jsonl(report / "images.jsonl")}
    assert {"bad\\xff\\xfename.jpg", "esc\\x1b[2Jape.jpg", "y" * 246 + ".jpg"} <= names
    csv_names = [r[0] for r in csv_rows(report / "per_image.csv")[1:]]
    assert "'=HYPERLINK(\"x\").jpg" in csv_names and not any(n.startswith(("=", "+", "-", "@")) for n in csv_names)
    markdown = (report / "report.md").read_text()
    assert "<img" not in markdown
    assert "\x1b" not in result.stderr + result.stdout + markdown + (report / "report.html").read_text()
    html = (report / "report.html").read_text()
    assert "<img src=x" not in html
    assert all(len(os.fsencode(p.name)) <= 120 for p in (report / "visuals").iterdir())


def test_skipped_and_failed_names_are_listed_escaped(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "<script>x<script>|y.jpg").write_bytes(b"not an image")
    (images / "=cmd.jpg").symlink_to("/etc/passwd")
    (images / "ok.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes())
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "r", "--no-isolate", html=True)
    no_traceback(result.stderr)
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| `<script>x<script>\\|y.jpg` | reference: " in markdown
    assert "| `=cmd.jpg` | symbolic link to outside the folder" in markdown
    html = (tmp_path / "r" / "report.html").read_text()
    assert "&lt;script&gt;x&lt;script&gt;|y.jpg" in html and "<script>" not in html
    assert [r[0] for r in csv_rows(tmp_path / "r" / "per_image.csv")[1:]].count("'=cmd.jpg") == 1


def test_the_worst_images_plot_under_any_name(server, photos_dir, tmp_path):
    """Three photos, so each is among the worst of every stage that differs and gets its
    visual and its plot title: a non-UTF-8 name, a 250-byte one, a mathtext one."""
    images = tmp_path / "images"
    images.mkdir()
    for name, photo in list(HOSTILE_NAMES.items())[:3]:
        (images / os.fsdecode(name)).write_bytes((photos_dir / photo).read_bytes())
    result = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "r", "--save-tensors",
                     html=True)
    no_traceback(result.stderr)
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "r" / "report.html").read_text()
    assert html.count("class=heatmap") >= 3 and "class=crops" in html
    assert "$\\undefinedcmd$.jpg" in html and "bad\\xff\\xfename.jpg" in html
    assert len(list((tmp_path / "r" / "tensors").iterdir())) == 3
    again = harness("compare", tmp_path / "r", tmp_path / "r", "--report", tmp_path / "self")
    assert again.returncode == 0, again.stderr
    assert strict_json(tmp_path / "self" / "report.json")["compared"] == 3


def test_follow_links_reads_outside_links_as_inputs(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "photo.jpg").symlink_to(photos_dir / "baboon.jpg")  # outside: followed only when asked
    (images / "passwd.jpg").symlink_to("/etc/passwd")
    plain = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "a", "--no-isolate")
    assert plain.returncode == 2 and "no images in" in plain.stderr and "all 2 entries skipped" in plain.stderr
    followed = harness("check", images, "--url", server.grpc_url, "--report", tmp_path / "b", "--no-isolate",
                       "--follow-links")
    assert followed.returncode == 0, followed.stderr
    data = strict_json(tmp_path / "b" / "report.json")
    assert data["compared"] == 1 and [f["image"] for f in data["failed"]] == ["passwd.jpg"]
    assert "root:x:0" not in (tmp_path / "b" / "report.md").read_text()  # the reason names the format, not the bytes


def test_links_planted_in_the_report_folder_are_replaced_never_written_through(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "ok.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes())
    report = tmp_path / "r"
    report.mkdir()
    victims = {name: tmp_path / f"victim-{name}" for name in ("report.md", "report.json", "report.html",
                                                              "images.jsonl", "per_image.csv", "run.json")}
    for name, victim in victims.items():
        victim.write_text("keep me")
        (report / name).symlink_to(victim)
    result = harness("check", images, "--url", server.grpc_url, "--report", report, "--no-isolate", html=True)
    assert result.returncode == 0, result.stderr
    assert all(victim.read_text() == "keep me" for victim in victims.values())
    assert not any((report / name).is_symlink() for name in victims)
    assert strict_json(report / "report.json")["compared"] == 1
    (report / "visuals").rename(tmp_path / "elsewhere")
    (report / "visuals").symlink_to(tmp_path / "elsewhere")
    refused = harness("check", images, "--url", server.grpc_url, "--report", report, "--no-isolate")
    assert refused.returncode == 2 and "refusing to write through it" in refused.stderr, refused.stderr
