"""The production server is locked down (issue 35, defect 1): the real ``tritonserver`` (the
embedded 2.51) runs with docker-compose.yml's own Triton command, as the real Compose binary
renders it with a key in ``TRITON_ADMIN_KEY``; only the repository path, the ports and the
model list (a tiny model of this test's repository instead of the production models) differ.
Over HTTP and gRPC, without the key a model load (with code in the request body), an unload,
a logging change and a trace change are refused and the code never runs; with the key each
works; inference and health stay open. Before issue 35 the compose command let anyone load
code (the load returned 200 and the code ran)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.server import TritonServer, free_port
from tests.test_compose import CHECK_FILE, COMPOSE_BINARY, COMPOSE_FILE, ROOT

KEY = "a-test-key-4b1d"
HEADER = "admin-key"
"""The header compose's restriction flags name (checked below, not assumed)."""
RESTRICT = {"http": "--http-restricted-api=", "grpc": "--grpc-restricted-protocol="}
"""Triton's flags (2.51 here, 2.70 in 26.06): HTTP says "api", gRPC says "protocol"."""
GRPC_PREFIX = "triton-grpc-protocol-"
"""Triton prefixes the key's header on gRPC (lower-case HTTP/2 metadata): admin-key is sent as
triton-grpc-protocol-admin-key there."""


def key_header(protocol: str, key: str = KEY) -> dict:
    return {(GRPC_PREFIX if protocol == "grpc" else "") + HEADER: key}

TINY_CONFIG = """name: "tiny"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MODEL_PY = """import pathlib
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pathlib.Path({marker!r}).write_text("ran")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


def compose_triton_command(*overrides) -> list[str]:
    """The triton service's command as the real Compose binary renders it (interpolated), of
    docker-compose.yml and the ``overrides`` files."""
    env = {"PATH": "/usr/bin:/bin", "TRITON_ADMIN_KEY": KEY, "HOME": str(ROOT)}
    files = [arg for file in (COMPOSE_FILE, *overrides) for arg in ("-f", str(file))]
    run = subprocess.run([str(COMPOSE_BINARY), *files, "config", "--format", "json"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["services"]["triton"]["command"]


class ComposeTriton(TritonServer):
    """The embedded tritonserver with compose's flags; ours only where this machine must differ."""

    def __init__(self, repository, flags: list[str], models: list[str]):
        super().__init__(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
        self.flags, self.load = flags, models

    def command(self, install) -> list[str]:
        kept = [f for f in self.flags if not f.startswith(("--model-repository=", "--load-model="))]
        assert kept[0] == "tritonserver"
        return [str(install.binary), f"--model-repository={self.repository}", *kept[1:],
                *(f"--load-model={m}" for m in self.load),
                f"--backend-directory={install.backends}",
                f"--http-address={self.host}", f"--http-port={self.http_port}",
                f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
                f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}", "--allow-gpu-metrics=false"]


@pytest.fixture(scope="module")
def flags():
    return compose_triton_command()


@pytest.fixture(scope="module")
def locked(flags, tmp_path_factory):
    root = tmp_path_factory.mktemp("locked")
    (root / "repository" / "tiny" / "1").mkdir(parents=True)
    (root / "repository" / "tiny" / "config.pbtxt").write_text(TINY_CONFIG)
    (root / "repository" / "tiny" / "1" / "model.py").write_text(MODEL_PY.format(marker=str(root / "tiny.ran")))
    with ComposeTriton(root / "repository", flags, ["tiny"]) as triton:
        yield triton, root


def test_compose_restricts_the_control_apis_on_both_protocols_with_a_key_from_the_environment(flags):
    text = COMPOSE_FILE.read_text()
    assert KEY not in text and "--model-control-mode=explicit" in flags  # the models are loaded by name
    for protocol in ("http", "grpc"):
        [flag] = [f for f in flags if f.startswith(RESTRICT[protocol])]
        apis, _, header = flag.split("=", 1)[1].partition(":")
        assert set(apis.split(",")) >= {"model-repository", "logging", "trace", "shared-memory"}
        assert header == f"{HEADER}={KEY}"
        assert "inference" not in apis and "health" not in apis  # the clients' APIs stay open
    # Without a key compose refuses to start at all (no silent open server).
    run = subprocess.run([str(COMPOSE_BINARY), "-f", str(COMPOSE_FILE), "config", "-q"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}, cwd=ROOT)
    assert run.returncode != 0 and "TRITON_ADMIN_KEY" in run.stderr
    config = json.loads(subprocess.run([str(COMPOSE_BINARY), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
                                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                                       env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT),
                                            "TRITON_ADMIN_KEY": KEY}).stdout)
    assert {p["host_ip"] for p in config["services"]["triton"]["ports"]} == {"127.0.0.1"}


def test_a_check_host_is_locked_down_as_production(flags):
    """docker-compose.check.yml replaces Triton's command (to load the stage taps too): the
    restriction flags and their key are the same, and it too refuses to start without a key."""
    check = compose_triton_command(CHECK_FILE)
    assert [f for f in check if f.startswith(tuple(RESTRICT.values()))] == \
        [f for f in flags if f.startswith(tuple(RESTRICT.values()))] != []
    assert "--model-control-mode=explicit" in check
    run = subprocess.run([str(COMPOSE_BINARY), "-f", str(COMPOSE_FILE), "-f", str(CHECK_FILE), "config", "-q"],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT)},
                         cwd=ROOT)
    assert run.returncode != 0 and "TRITON_ADMIN_KEY" in run.stderr


@pytest.fixture
def client_of():
    """A client of the locked server by protocol, closed after the test (an HTTP connection left
    open holds the server's graceful stop for its whole 30 s exit timeout)."""
    made = []

    def connect(triton, protocol):
        made.append(httpclient.InferenceServerClient(triton.http_url) if protocol == "http"
                    else grpcclient.InferenceServerClient(triton.grpc_url))
        return made[-1]

    yield connect
    for client in made:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_the_key_no_load_unload_logging_or_trace_change(locked, protocol, client_of):
    triton, root = locked
    client = client_of(triton, protocol)
    marker = root / f"pwn_{protocol}.ran"
    files = {"file:1/model.py": MODEL_PY.format(marker=str(marker)).encode()}
    config = json.dumps({"name": f"pwn_{protocol}", "backend": "python", "max_batch_size": 0,
                         "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
                         "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2]}]})
    refused = []
    for attempt in (lambda: client.load_model(f"pwn_{protocol}", config=config, files=files),
                    lambda: client.unload_model("tiny"),
                    lambda: client.update_log_settings({"log_verbose_level": 1}),
                    lambda: client.update_trace_settings(settings={"trace_rate": "1"}),
                    lambda: client.get_model_repository_index()):
        with pytest.raises(InferenceServerException) as refusal:
            attempt()
        refused.append(str(refusal.value))
    assert all("restricted" in r.lower() or HEADER in r for r in refused), refused
    assert not marker.exists() and not client.is_model_ready(f"pwn_{protocol}")
    assert client.is_model_ready("tiny")  # the unload was refused
    # What the clients use stays open: health, metadata, config, inference.
    assert client.is_server_ready() and client.get_model_config("tiny")
    infer = httpclient if protocol == "http" else grpcclient
    x = infer.InferInput("X", [2], "FP32")
    x.set_data_from_numpy(np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(client.infer("tiny", [x]).as_numpy("Y"), [1.5, -2.0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_with_the_key_the_operator_loads_unloads_and_changes_logging_and_trace(locked, protocol, client_of):
    triton, root = locked
    client, headers = client_of(triton, protocol), key_header(protocol)
    marker = root / f"admin_{protocol}.ran"
    name = f"admin_{protocol}"
    config = json.dumps({"name": name, "backend": "python", "max_batch_size": 0,
                         "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
                         "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2]}]})
    client.load_model(name, headers=headers, config=config,
                      files={"file:1/model.py": MODEL_PY.format(marker=str(marker)).encode()})
    assert client.is_model_ready(name) and marker.exists()
    client.unload_model(name, headers=headers)
    client.update_log_settings({"log_verbose_level": 0}, headers=headers)
    client.update_trace_settings(settings={"trace_rate": "1000"}, headers=headers)
    assert client.get_model_repository_index(headers=headers)
    with pytest.raises(InferenceServerException):  # a wrong key is no key
        client.unload_model("tiny", headers=key_header(protocol, KEY + "x"))
    assert client.is_model_ready("tiny")
