"""The Triton server under test: where it is, whether it is ready, what an ensemble runs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.errors import HarnessError
from loadtest.metrics import MetricsError, scrape

DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


class ServerNotReady(HarnessError, RuntimeError):
    """The server is unreachable, not ready, or lacks a model the sweep needs (exit status 2)."""


@dataclass(frozen=True)
class Endpoints:
    """Addresses of one Triton server: HTTP and gRPC as ``host:port``, metrics as a URL."""

    http: str
    grpc: str
    metrics: str

    @classmethod
    def from_url(cls, url: str, grpc: str | None = None, metrics: str | None = None) -> "Endpoints":
        """From the HTTP address (``host[:port]``, scheme optional); gRPC and metrics default
        to the same host on ports 8001 and 8002."""
        host, port = split_host_port(url, DEFAULT_PORTS["http"])
        return cls(
            http=f"{host}:{port}",
            grpc=grpc or f"{host}:{DEFAULT_PORTS['grpc']}",
            metrics=metrics or f"http://{host}:{DEFAULT_PORTS['metrics']}/metrics",
        )

    def url(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http


def split_host_port(url: str, default_port: int) -> tuple[str, int]:
    """``"http://h:1"``, ``"h:1"`` or ``"h"`` -> (host, port)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    if not parts.hostname:
        raise ValueError(f"no host in {url!r}")
    return parts.hostname, parts.port or default_port


def target_address(host: str | None, protocol: str) -> tuple[str, str]:
    """Locust's ``--host`` -> (protocol, ``host:port``).

    ``grpc://h:p`` and ``http://h:p`` choose the protocol; a bare ``h[:p]`` uses
    ``protocol``. Without a port, Triton's default port of the protocol is used.
    """
    if not host:
        raise ValueError("no Triton address: pass --host (e.g. 127.0.0.1:8001)")
    scheme, sep, rest = host.partition("://")
    if sep:
        if scheme not in ("grpc", "http"):
            raise ValueError(f"unsupported scheme in {host!r}: use grpc:// or http://")
        protocol = scheme
    elif protocol not in ("grpc", "http"):
        raise ValueError(f"protocol must be grpc or http, got {protocol!r}")
    name, port = split_host_port(rest if sep else host, DEFAULT_PORTS[protocol])
    return protocol, f"{name}:{port}"


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def check_ready(endpoints: Endpoints, ensembles: list[str], protocols: list[str], timeout: float = 5.0) -> None:
    """Raise :class:`ServerNotReady`, with a message saying what is wrong, unless the
    server, every ensemble, every protocol's endpoint and the metrics answer."""
    where = f"Triton server at {endpoints.http} (HTTP)"
    try:
        status, _ = _get(f"http://{endpoints.http}/v2/health/ready", timeout)
    except (OSError, ValueError) as exc:
        raise ServerNotReady(f"{where} is not reachable: {exc}") from None
    if status != 200:
        raise ServerNotReady(f"{where} is not ready (HTTP {status} from /v2/health/ready)")
    for ensemble in ensembles:
        status, _ = _get(f"http://{endpoints.http}/v2/models/{ensemble}/ready", timeout)
        if status != 200:
            raise ServerNotReady(f"model '{ensemble}' is not ready on {where} (HTTP {status})")
    if "grpc" in protocols:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(endpoints.grpc)
        try:
            ready = client.is_server_ready(client_timeout=timeout)
        except Exception as exc:  # refused, timed out, not a gRPC server
            raise ServerNotReady(f"Triton gRPC endpoint {endpoints.grpc} is not reachable: {exc}") from None
        finally:
            client.close()
        if not ready:
            raise ServerNotReady(f"Triton gRPC endpoint {endpoints.grpc} is not ready")
    try:
        scrape(endpoints.metrics, timeout)
    except MetricsError as exc:
        raise ServerNotReady(str(exc)) from None


def check_inputs(endpoints: Endpoints, models: list[str], client: str | None, photo: bytes | None,
                 timeout: float = 5.0) -> None:
    """Raise, in one line, unless each model takes what the Locust users will send: an encoded
    image (UINT8 [-1] or BYTES [1]), or with ``client`` (``file.py:name``) the tensors the
    client's function makes of ``photo`` (the first photo sent). Without this a model that takes
    neither answers every request with an error and Locust never reaches its users."""
    from harness.deployment.discovery import DeploymentError, image_input, parse_config

    for model in models:
        status, body = _get(f"http://{endpoints.http}/v2/models/{model}/config", timeout)
        if status != 200:
            raise ServerNotReady(f"cannot read the config of '{model}' (HTTP {status})")
        info = parse_config(json.loads(body))
        if client:
            if photo is None:  # no photo here (a remote Locust's): the users will say what fails
                continue
            from harness.client import InferenceError
            from harness.deployment.client_side import ClientRequest, load_client

            try:
                ClientRequest(model, client, load_client(client), info.inputs, info.batched).inputs([photo])
            except InferenceError as exc:
                raise DeploymentError(f"--client {client} --model {model}: {exc}") from None
            continue
        try:
            image_input(info)
        except DeploymentError as exc:
            raise DeploymentError(f"{exc}; a model fed tensors made by your client's preprocessing takes "
                                  "--client FILE.py:NAME") from None


def ensemble_models(endpoints: Endpoints, ensemble: str, timeout: float = 5.0) -> list[str]:
    """The ensemble followed by the models its steps run, as the server reports its config."""
    status, body = _get(f"http://{endpoints.http}/v2/models/{ensemble}/config", timeout)
    if status != 200:
        raise ServerNotReady(f"cannot read the config of '{ensemble}' (HTTP {status})")
    config = json.loads(body)
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    return [ensemble] + [step["model_name"] for step in steps]
