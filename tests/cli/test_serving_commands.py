"""The serving commands, run as a user runs them (the command line's ``main``, real server)."""

import pytest

from tests.commands import harness


@pytest.mark.server  # starts its own tritonserver
def test_infer_starts_an_embedded_server_and_classifies(photos_dir):
    result = harness("infer", photos_dir / "squirrel_cls.jpg", photos_dir / "baboon.jpg", "--pipeline", "dali",
                     "--pipeline", "opencv")
    assert result.returncode == 0, result.stderr
    assert "fox squirrel" in result.stdout and "baboon" in result.stdout
    assert "embedded Triton server ready" in result.stderr


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_infer_against_a_running_server(server, photos_dir, protocol):
    result = harness("infer", photos_dir / "orange.jpg", "--url", server.url(protocol), "--protocol", protocol, "--top-k", "3")
    assert result.returncode == 0, result.stderr
    assert "orange" in result.stdout


def test_a_bad_file_is_a_failed_row_and_exit_status_1(server, photos_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("not a photo\n")
    result = harness("infer", photos_dir / "baboon.jpg", tmp_path / "notes.txt", "--url", server.grpc_url)
    assert result.returncode == 1
    assert "baboon" in result.stdout and "not an image" in result.stdout


def test_usage_and_setup_errors_exit_2(tmp_path, server):
    assert harness("infer", tmp_path / "missing.jpg", "--url", server.grpc_url).returncode == 2
    unreachable = harness("infer", tmp_path, "--url", "127.0.0.1:9", "--protocol", "http")
    assert unreachable.returncode == 2 and "not reachable" in unreachable.stderr
    gpu = harness("serve", "--profile", "gpu")
    assert gpu.returncode == 2 and "docker compose" in gpu.stderr
    assert harness("infer").returncode == 2  # argparse: missing images


def test_model_import_sets_the_class_count_of_every_config_it_concerns(repository, tmp_path):
    # A 2-class classifier: the classifier's and both ensembles' outputs become [2], so the
    # repository loads as it is; the configs that name no class count are left untouched.
    import shutil

    import torch

    from harness.model import export_module
    from harness.repository import load_repository

    repo = tmp_path / "model_repository"
    shutil.copytree(repository, repo, ignore=shutil.ignore_patterns("*.onnx", "__pycache__"))
    shutil.copy(repository / "classifier" / "model.onnx", repo / "classifier" / "model.onnx")
    net = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 2))
    export_module(net, tmp_path / "mine", ["ant", "bee"])
    before = {p.parent.name: p.read_text() for p in repo.glob("*/config.pbtxt")}
    run = harness("model", "import", tmp_path / "mine" / "model.onnx", "--class-names", tmp_path / "mine" / "labels.txt",
                  "--repository", repo)
    assert run.returncode == 0, run.stdout + run.stderr
    configs = load_repository(repo)
    for model in ("classifier", "classify_dali", "classify_opencv"):
        assert [list(o.dims) for o in configs[model].output] == [[2], [2]], model
    untouched = {p.parent.name for p in repo.glob("*/config.pbtxt") if p.read_text() == before[p.parent.name]}
    assert untouched == set(before) - {"classifier", "classify_dali", "classify_opencv"}
    assert "class count set to 2" in run.stdout + run.stderr  # rich prints its messages to stderr
