"""harness/session.py: what every job sets up, read from the real repository (no server)."""

import pytest

from harness.compare.tolerance import DEFAULT_TOLERANCES
from harness.errors import UsageError
from harness.scores import PROBABILITY_ATOL
from harness.session import DEFAULT_TIMEOUT, Session
from harness.spec import SPEC_FILENAME
from harness.stage import Stage


def test_a_session_reads_the_repository_s_own_spec_and_model(repository):
    session = Session(repository)
    assert session.spec_path == repository / SPEC_FILENAME and session.spec.source == str(repository / SPEC_FILENAME)
    assert session.spec is session.spec  # read once
    assert session.onnx_path.is_file() and len(session.classes()) == 1000
    assert session.recipe().name == session.spec.reference.recipe
    assert session.timeout == DEFAULT_TIMEOUT and session.url is None


def test_the_tie_margin_defaults_to_the_output_tolerance(repository):
    session = Session(repository)
    assert session.tolerances()[Stage.OUTPUT] == DEFAULT_TOLERANCES[Stage.OUTPUT] and DEFAULT_TOLERANCES[Stage.OUTPUT].atol == 0.5
    assert session.tie_margin() == 0.5 and session.tie_margin(0.0) == 0.0
    with pytest.raises(UsageError, match="--tie-margin must be at least 0, got -1"):
        session.tie_margin(-1)
    # A deployment answering probabilities is compared in probability units, its ties too.
    assert session.tie_margin(None, "probabilities") == PROBABILITY_ATOL == 0.05
    assert session.tie_margin(0.1, "probabilities") == 0.1
    rule = session.tolerances("probabilities")[Stage.OUTPUT]  # every class, and the mass that moved
    assert (rule.atol, rule.max_fraction, rule.mean_atol, rule.max_total_variation) == (0.05, 0.0, None, 0.2)


def test_another_spec_overrides_the_tolerances(repository, tmp_path):
    spec = tmp_path / "loose.toml"
    spec.write_text(f'extends = "{repository / SPEC_FILENAME}"\n\n[tolerances.output]\natol = 2\n')
    session = Session(repository, spec)
    assert session.spec_path == spec and session.tie_margin() == 2.0


def test_every_job_names_its_server_the_same_way(repository):
    from types import SimpleNamespace

    from harness.results import ServerInfo

    client = SimpleNamespace(url="127.0.0.1:8001", protocol="grpc")  # what a ready client tells
    assert Session(repository).server_info(client) == ServerInfo("embedded server (127.0.0.1:8001)", "grpc")
    assert Session(repository, url="127.0.0.1:8001").server_info(client) == ServerInfo("127.0.0.1:8001", "grpc")
