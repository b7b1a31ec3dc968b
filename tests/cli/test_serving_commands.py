"""The serving commands, run as a user runs them (a subprocess, real server)."""

import subprocess
import sys

import pytest


def harness(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_infer_starts_an_embedded_server_and_classifies(photos_dir):
    result = harness("infer", photos_dir / "squirrel_cls.jpg", photos_dir / "baboon.jpg", "--pipeline", "both")
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
