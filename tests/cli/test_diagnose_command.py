"""`harness diagnose` as a user runs it."""

import json

from tests.cli.test_serving_commands import harness
from tests.conftest import copy_photos


def test_diagnose_writes_its_report_and_names_the_fix(server, photos_dir, repository, tmp_path):
    images = copy_photos(photos_dir, ("squirrel_cls.jpg", "baboon.jpg", "orange.jpg"), tmp_path / "images")
    spec = repository.parent / "specs" / "planted" / "channel_order.toml"
    result = harness("diagnose", images, "--spec", spec, "--url", server.grpc_url, "--report", tmp_path / "r",
                     "--reference-model", "onnx")
    assert result.returncode == 0, result.stderr
    assert "**channel order RGB** (channel order) explains it" in result.stdout
    diagnosis = json.loads((tmp_path / "r" / "diagnosis.json").read_text())
    assert diagnosis["first_divergent_stage"] == "input" and diagnosis["explained_by"] == "channel order RGB"
    top = diagnosis["hypotheses"][0]
    assert top["diverged_before"] == 3 and top["diverged_after"] == 0
    assert (tmp_path / "r" / "diagnosis.md").read_text().startswith("# Diagnosis")
    custom = harness("diagnose", images, "--url", server.grpc_url, "--reference", "x.py:fn")
    assert custom.returncode == 2 and "built-in recipe" in custom.stderr
