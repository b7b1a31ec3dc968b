"""The user's code cannot end a run (issue 35, defect 2): a ``--client``, a ``--reference
FILE.py:NAME`` or a ``--postprocess`` calling ``sys.exit()`` (or raising ``KeyboardInterrupt``
of its own) on one image makes that image a failed row naming what it raised; the run goes on,
writes its report and exits with its real status (before: status 0, no report, no message).
Real photos, the real embedded server over HTTP and gRPC."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_serving_commands import harness
from tests.conftest import copy_photos
from tests.robust import counts_add_up, no_traceback

PHOTOS = ["baboon.jpg", "fruits.jpg", "orange.jpg"]
QUITTER = "fruits.jpg"
"""The image on which the user's code quits; the others are compared."""


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


def user_file(tmp_path, photos_dir, body: str) -> str:
    """A user's file whose code quits on :data:`QUITTER` (recognised by its length)."""
    size = (photos_dir / QUITTER).stat().st_size
    path = tmp_path / "user_code.py"
    path.write_text("import sys\n\nimport cv2\nimport numpy as np\n\n"
                    f"QUIT_SIZE = {size}\n\n\n" + body)
    return str(path)


PREPROCESS = """
def pixels(data):
    image = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    image = cv2.resize(image, (224, 224), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(((image.astype(np.float32) - 127.0) / 128.0).transpose(2, 0, 1))


def quits(data):
    if len(data) == QUIT_SIZE:
        sys.exit({code})
    return pixels(data)
"""


def rows_of(report) -> dict:
    return {json.loads(line)["image"]: json.loads(line) for line in (report / "images.jsonl").read_text().splitlines()}


def assert_one_failed_row(result, report, *words):
    no_traceback(result.stdout, result.stderr)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # a verdict, not an exit of the user's choosing
    data = json.loads((report / "report.json").read_text())
    assert counts_add_up(data) == len(PHOTOS) and data["compared"] == len(PHOTOS) - 1
    row = rows_of(report)[QUITTER]
    assert row["outcome"] != "compared" and all(w in row["error"] for w in words), row


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_calling_sys_exit_fails_its_image_only(server, images, photos_dir, tmp_path, protocol):
    client = user_file(tmp_path, photos_dir, PREPROCESS.format(code="0"))
    report = tmp_path / "report"
    result = harness("check", images, "--url", server.url(protocol), "--protocol", protocol, "--model", "classifier",
                     "--client", f"{client}:quits", "--report", report, "--no-isolate", "--format", "json")
    assert_one_failed_row(result, report, "client quits failed", "SystemExit")


def test_a_reference_calling_sys_exit_fails_its_image_only(server, images, photos_dir, tmp_path):
    reference = user_file(tmp_path, photos_dir, PREPROCESS.format(code="3"))
    report = tmp_path / "report"
    result = harness("check", images, "--url", server.http_url, "--protocol", "http", "--reference",
                     f"{reference}:quits", "--report", report, "--no-isolate", "--format", "json")
    assert_one_failed_row(result, report, "reference", "SystemExit: 3")


def test_a_postprocess_calling_sys_exit_fails_its_image_and_is_not_called_the_reference(server, images, photos_dir,
                                                                                        tmp_path, spec):
    from PIL import Image

    with Image.open(photos_dir / QUITTER) as im:
        height, width = im.height, im.width
    post = tmp_path / "post.py"
    post.write_text("import sys\n\nfrom harness.detection.postprocess import from_table\n\n"
                    "DB = from_table({'name': 'db'})\n\n\n"
                    "def boxes(outputs, geometry):\n"
                    f"    if tuple(geometry.source) == ({height}, {width}):\n"
                    "        raise KeyboardInterrupt('not a real one')\n"
                    "    return DB(outputs, geometry)\n")
    report = tmp_path / "report"
    result = harness("check", images, "--url", server.grpc_url, "--task", "detection", "--postprocess",
                     f"{post}:boxes", "--report", report, "--no-isolate", "--format", "json", timeout=600)
    assert_one_failed_row(result, report, "postprocessing: --postprocess", "KeyboardInterrupt: not a real one")
    assert not rows_of(report)[QUITTER]["error"].startswith("reference")


def test_a_diagnose_client_calling_sys_exit_fails_its_image_only(server, images, photos_dir, tmp_path):
    client = user_file(tmp_path, photos_dir, PREPROCESS.format(code="None"))
    report = tmp_path / "diagnosis"
    result = harness("diagnose", images, "--url", server.grpc_url, "--model", "classifier", "--client",
                     f"{client}:quits", "--report", report, timeout=600)
    no_traceback(result.stdout, result.stderr)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    text = (report / "diagnosis.json").read_text()
    assert QUITTER in text and "SystemExit" in text


def test_run_command_gives_status_2_for_user_codes_exit_that_escaped_every_image():
    """The last net: whatever user code raised that reached the command is status 2 with one
    line, never the user's own status (sys.exit(0) was a pass)."""
    from harness.errors import UserCodeExit, call_user, exit_status_of, message_of, run_command

    lines = []
    assert run_command(lambda: call_user(lambda: __import__("sys").exit(0)), lines.append) == 2
    assert lines == ["user code raised SystemExit(0)"]
    assert run_command(lambda: __import__("sys").exit(0), lines.append) == 2
    assert lines[1] == "user code raised SystemExit(0): the command stopped without a verdict"
    assert exit_status_of(SystemExit(0)) == 2 and "SystemExit" in message_of(SystemExit(0))
    with pytest.raises(UserCodeExit, match=r"KeyboardInterrupt\(mine\)"):
        call_user(lambda: (_ for _ in ()).throw(KeyboardInterrupt("mine")))
