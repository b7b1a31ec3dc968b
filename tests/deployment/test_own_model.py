"""A ``--model`` bearing this repository's names on a user's server (issue 59, item 3): the user
deployed their own classifier as this repository's models (what ``harness deploy`` writes), so
``classify_dali`` on their server is not this repository's EfficientNet-Lite0. Without
``--reference-model`` the check refuses, saying why; with the user's model it checks.

The user's network here: EfficientNet-Lite0 with its classifier head's classes in reverse order
(the same signature, another answer), in the cpu profile of this repository, served by a real
tritonserver with the two pipelines' ensembles."""

import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from harness.paths import DEFAULT_REPOSITORY
from harness.repository import build_cpu_profile, load_config, save_config
from harness.server import TritonServer, free_port
from tests.commands import harness
from tests.conftest import copy_photos

pytestmark = pytest.mark.server  # the user's deployment is served by a server of its own

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg"]
HEAD = ("net._fc.weight", "net._fc.bias")


def reversed_head(path):
    """EfficientNet-Lite0 whose 1,000 classes come out in reverse order: another classifier."""
    model = onnx.load(str(ONNX))
    for tensor in model.graph.initializer:
        if tensor.name in HEAD:
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(tensor)[::-1]), tensor.name))
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """The user's deployment on a server of its own: this repository's cpu profile serving the
    reversed network as ``classifier``, and a ``classify_opencv`` whose batch the user set to 8."""
    work = tmp_path_factory.mktemp("users")
    network = reversed_head(work / "theirs.onnx")
    repository = build_cpu_profile(DEFAULT_REPOSITORY, work / "repository")
    (repository / "classifier" / "model.onnx").unlink()  # a link to this repository's ONNX: replaced, not written through
    shutil.copy(network, repository / "classifier" / "model.onnx")
    config = load_config(repository / "classify_opencv" / "config.pbtxt")
    config.max_batch_size = 8
    save_config(config, repository / "classify_opencv" / "config.pbtxt")
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          models=["classify_dali", "classify_opencv"], log_file=work / "server.log")
    with server:
        yield server, network
    assert not server.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, PHOTOS, tmp_path_factory.mktemp("images"))


def test_another_network_under_this_repositorys_name_is_refused_naming_the_options(users, images, tmp_path):
    server, _ = users
    result = harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--report", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if "not provably" in line]
    assert "--model classify_dali is not provably this repository's model (classifier answers baboon.jpg " \
           "unlike this repository's model" in line
    assert "--reference-model PATH" in line and "--repository DIR" in line
    assert not (tmp_path / "report.json").exists()


def test_a_configuration_of_its_own_is_named(users, images, tmp_path):
    server, _ = users
    result = harness("check", images, "--url", server.grpc_url, "--model", "classify_opencv", "--report", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "(classify_opencv batches 8, this repository's 64)" in result.stderr


def test_with_the_users_model_the_same_deployment_is_checked(users, images, tmp_path):
    server, network = users
    result = harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--reference-model",
                     network, "--report", tmp_path, "--no-isolate")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_server_without_the_stage_taps_is_refused_naming_the_check_hosts_switch(users, images, tmp_path):
    """Issue 58: this server loads what production loads of classification (the ensembles and their
    steps), no preprocess_dali_taps: a check of the DALI pipeline says in one line which models are
    missing and how a check host loads them (compose's override file, the Kubernetes overlay)."""
    server, _ = users
    result = harness("check", images, "--url", server.grpc_url, "--pipeline", "dali", "--report", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if "stage taps" in line]
    assert line.startswith(f"error: no preprocess_dali_taps on {server.grpc_url}: it serves classify_dali without")
    assert "docker-compose.check.yml" in line and "deploy/kubernetes/overlays/check-host" in line
    assert "Traceback" not in result.stderr and not (tmp_path / "report.json").exists()


def test_preflight_against_it_names_the_missing_stage_taps_and_the_switch(users):
    """preflight reads the classifier's stage taps (its known answers are every stage): against a
    server without them its "models ready" row fails naming them and the check host's switch."""
    from harness.client import TritonClient
    from harness.manifest import load_manifest
    from harness.preflight import FAIL, server_rows

    server, _ = users
    with TritonClient(server.grpc_url, "grpc") as client:
        ready = {r.check: r for r in server_rows(client, load_manifest(), "cpu", repository=DEFAULT_REPOSITORY)}
    row = ready["models ready"]
    assert row.status == FAIL and row.found.startswith("not ready: preprocess_dali_stages, preprocess_dali_taps (")
    assert "stage taps; load them with the check host's switch: docker compose -f docker-compose.yml -f " \
           "docker-compose.check.yml" in row.found


def test_repeat_against_it_names_the_check_hosts_switch(users, images, tmp_path):
    """harness repeat probes the taps model too: refused before any request, in the same one line
    (it was Triton's "unknown model: 'preprocess_dali_taps'")."""
    server, _ = users
    result = harness("repeat", images, "--url", server.grpc_url, "--repeats", 1, "--report", tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: no preprocess_dali_taps on" in result.stderr and "docker-compose.check.yml" in result.stderr
    assert "unknown model" not in result.stderr and not (tmp_path / "repeat.json").exists()
