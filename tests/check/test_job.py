"""harness/check/job.py: the check as a job, called without the command line."""

import json

import pytest

from harness.check.job import CheckOptions, run
from harness.deployment.target import Target
from harness.errors import NothingCompared, UsageError
from harness.session import Session
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
