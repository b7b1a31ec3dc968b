"""The embedded tritonserver's lifecycle: start, ready, stop by its own PID, clear failures."""

import socket
import urllib.request

import pytest

from harness.server import ServerError, TritonServer, free_port


def test_serves_on_loopback_and_stops_cleanly(cpu_repository, tmp_path):
    server = TritonServer(cpu_repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=tmp_path / "triton.log", models=["preprocess_opencv"])
    with server:
        assert server.is_running()
        with urllib.request.urlopen(f"http://{server.http_url}/v2/models/preprocess_opencv/ready") as r:
            assert r.status == 200
        with urllib.request.urlopen(server.metrics_url) as r:
            assert b"nv_inference_request_success" in r.read()
        pid = server.process.pid
    assert not server.is_running()
    assert server.process.returncode == 0, server.log_tail()
    with pytest.raises(ProcessLookupError):
        import os
        os.kill(pid, 0)
    assert "successfully loaded 'preprocess_opencv'" in (tmp_path / "triton.log").read_text()


def test_port_in_use_is_refused_before_starting(cpu_repository, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = TritonServer(cpu_repository, http_port=port, grpc_port=free_port(), metrics_port=free_port(),
                              log_file=tmp_path / "t.log")
        with pytest.raises(ServerError, match=f"HTTP port 127.0.0.1:{port} is already in use"):
            server.start()
        assert server.process is None


def test_a_model_that_fails_to_load_stops_startup_with_the_log(cpu_repository, tmp_path):
    broken = tmp_path / "repo"
    (broken / "classifier" / "1").mkdir(parents=True)
    (broken / "classifier" / "config.pbtxt").write_text(
        (cpu_repository / "classifier" / "config.pbtxt").read_text())  # no model.onnx beside it
    (broken / "classifier" / "1" / "model.py").write_text(
        (cpu_repository / "classifier" / "1" / "model.py").read_text())
    server = TritonServer(broken, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          startup_timeout=120)
    with pytest.raises(ServerError, match="exited with code") as err:
        server.start()
    assert "failed to load 'classifier'" in str(err.value) and "labels.txt" in str(err.value)
    assert not server.is_running()


def test_the_server_stops_when_the_process_that_started_it_is_killed(cpu_repository, tmp_path):
    """A harness killed with SIGKILL (a CI timeout, docker stop) runs no cleanup of its own:
    the kernel must stop its server, or it would keep serving, and holding its ports."""
    import os
    import signal
    import subprocess
    import sys
    import time

    starter = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from harness.server import TritonServer, free_port
server = TritonServer({str(cpu_repository)!r}, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      log_file={str(tmp_path / "triton.log")!r}, models=["preprocess_opencv"]).start()
print(server.process.pid, flush=True)
time.sleep(600)
"""], stdout=subprocess.PIPE, text=True)
    server_pid = None
    try:
        server_pid = int(starter.stdout.readline())
        os.kill(server_pid, 0)  # serving
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.25)
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)
    finally:
        starter.kill()
        if server_pid:
            try:
                os.killpg(server_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
