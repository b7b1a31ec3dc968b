"""harness/check/job.py: the check as a job, called without the command line."""

import json

import pytest

from harness.check.job import CheckOptions, run
from harness.errors import NothingCompared, UsageError
from harness.session import Session
from harness.target import Target
from tests.conftest import copy_photos


def test_a_job_runs_from_a_session_and_options(server, photos_dir, tmp_path):
    images = copy_photos(photos_dir, ["baboon.jpg", "orange.jpg"], tmp_path / "images")
    lines = []
    result = run(Session(url=server.grpc_url), CheckOptions(images, tmp_path / "report", Target(model="classify_dali")),
                 log=lines.append)
    assert result.exit_status() == 0 and result.paths["json"].exists()
    assert json.loads(result.paths["json"].read_text())["compared"] == 2
    assert "ensemble steps: validate_image -> preprocess_dali -> classifier" in lines


def test_bad_options_and_nothing_compared(server, tmp_path):
    session = Session(url=server.grpc_url)
    with pytest.raises(UsageError, match="--top-k must be at least 1"):
        (tmp_path / "one").mkdir()
        (tmp_path / "one" / "a.jpg").write_bytes(b"not an image")
        run(session, CheckOptions(tmp_path / "one", tmp_path / "r", top_k=0))
    result = run(session, CheckOptions(tmp_path / "one", tmp_path / "r"))
    with pytest.raises(NothingCompared):
        result.exit_status()


def test_the_resume_command_quotes_any_path_for_a_shell(tmp_path):
    """What the hint prints, a shell reads back byte for byte (names not UTF-8, quotes, $, escapes)."""
    import os
    import subprocess

    from harness.check.job import resume_command, shell_quote

    for raw in (b"/tmp/r\xff\xfe", b"it's", b"a b$c`d", b"\x1b[2J", "caf\u00e9".encode(), b"plain"):
        printed = subprocess.run(["bash", "-c", "printf %s " + shell_quote(os.fsdecode(raw))], capture_output=True)
        assert printed.stdout == raw
    command = resume_command(Session(url="127.0.0.1:8001", protocol="http", timeout=60),
                             CheckOptions(tmp_path / "img s", tmp_path / "r", Target(pipeline="opencv"), workers=2))
    assert command.startswith(f"harness check '{tmp_path}/img s' --report {tmp_path}/r --resume --pipeline opencv ")
    assert "--url 127.0.0.1:8001 --protocol http --timeout 60 --workers 2" in command
