"""harness/errors.py: the one exception-to-exit-status policy of every command."""

import pytest

from harness.accuracy import DatasetError
from harness.errors import ERROR_STATUS, NothingCompared, ServerStopped, UsageError, exit_status_of
from harness.model import ModelError
from harness.spec import SpecError


@pytest.mark.parametrize("error, status", [
    (UsageError("no images"), ERROR_STATUS), (NothingCompared("none"), ERROR_STATUS),
    (ServerStopped("127.0.0.1:1", "a.jpg", "timeout"), ERROR_STATUS), (SpecError("bad spec"), ERROR_STATUS),
    (FileNotFoundError("x"), ERROR_STATUS), (DatasetError("bad csv"), ERROR_STATUS),
    (ModelError("no model"), ERROR_STATUS), (KeyboardInterrupt(), ERROR_STATUS), (ValueError("a bug"), None),
])
def test_one_exit_status_policy(error, status):
    assert exit_status_of(error) == status


def test_every_library_refusal_is_a_harness_error_and_still_its_builtin_type():
    from harness.client import InferenceError, ServerUnavailable
    from harness.errors import HarnessError
    from harness.manifest import ManifestError
    from harness.preprocessing import ImageError
    from harness.repository import RepositoryError
    from harness.server import ServerError

    for error in (SpecError, ModelError, DatasetError, RepositoryError, ImageError, ManifestError):
        assert issubclass(error, HarnessError) and issubclass(error, ValueError)
    for error in (ServerError, InferenceError, ServerUnavailable):
        assert issubclass(error, HarnessError) and issubclass(error, RuntimeError)
        assert exit_status_of(error("x")) == ERROR_STATUS


def test_a_stopped_server_says_where_and_what_now():
    stopped = ServerStopped("127.0.0.1:1", "a.jpg", "deadline exceeded").then("3 images kept")
    assert str(stopped) == "the Triton server at 127.0.0.1:1 stopped answering at image 'a.jpg': deadline exceeded. " \
                           "3 images kept"
    assert str(ServerStopped("h:1", None, "gone")) == "the Triton server at h:1 stopped answering: gone"


def test_run_command_reports_a_refusal_and_lets_a_bug_raise():
    from harness.errors import run_command

    said = []

    def refuse() -> int:
        raise UsageError("no images in /nowhere")

    assert run_command(refuse, said.append) == ERROR_STATUS and said == ["no images in /nowhere"]
    assert run_command(lambda: 1, said.append) == 1 and len(said) == 1

    def bug() -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run_command(bug, said.append)
