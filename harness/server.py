"""The embedded Triton server: the real ``tritonserver`` binary from the nvidia-pytriton wheel.

:class:`TritonServer` starts it on a model repository, waits until every model is ready,
logs to a file, and stops it by its own PID (SIGTERM, waiting for the exit; SIGKILL only
after a timeout), or, should the process that started it die first, the kernel does. Use it
as a context manager::

    with TritonServer(repo, http_port=8000) as server:
        client = tritonclient.http.InferenceServerClient(server.http_url)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError, install_hint

TRITON_HOME_ENV = "HARNESS_TRITON_HOME"
DEFAULT_TRITON_HOME = Path(sys.prefix) / "pytriton"
"""Where ``make setup`` installs the wheel (``pip install --no-deps --target``), kept out of
site-packages because pytriton's own dependencies are not wanted in the project's locked environment.
Elsewhere the ``server`` extra installs it as a package (docs/deploy.md)."""

PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


_CPU_ONLY_NOISE = ("CudaDriverHelper", "NVML", "DCGM", "CUDA", "GPU metrics")
"""Errors tritonserver logs on every start without a GPU; not worth showing."""


class ServerError(HarnessError, RuntimeError):
    """The server could not be started, did not become ready, or did not stop."""


@dataclass(frozen=True)
class TritonInstall:
    """The pieces of the wheel the server needs."""

    home: Path

    @property
    def binary(self) -> Path:
        return self.home / "pytriton" / "tritonserver" / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.home / "pytriton" / "tritonserver" / "backends"

    @property
    def libs(self) -> Path:
        return self.home / "nvidia_pytriton.libs"

    @property
    def stub(self) -> Path:
        return self.backends / "python" / "triton_python_backend_stub"

    def check(self) -> None:
        if not self.binary.exists():
            raise ServerError(f"tritonserver not found at {self.binary}: the embedded server needs nvidia-pytriton, in a "
                              f"Python 3.11 environment of its own: {install_hint('server')} (docs/deploy.md; in the "
                              f"project: make setup; or point {TRITON_HOME_ENV} at a `pip install --target` of it)")
        if not self.stub.exists():
            # The stub must sit in the backend's own folder: copied anywhere else its RPATH
            # no longer finds the wheel's libraries.
            bundled = self.home / "pytriton" / "tritonserver" / "python_backend_stubs" / PYTHON_VERSION / self.stub.name
            if not bundled.exists():
                raise ServerError(f"no Python backend stub for Python {PYTHON_VERSION} in {bundled.parent.parent}")
            shutil.copy2(bundled, self.stub)


def find_install() -> TritonInstall:
    """The wheel at ``$HARNESS_TRITON_HOME``, else where ``make setup`` puts it, else installed as a
    package (the ``server`` extra): the folder holding ``pytriton/`` and ``nvidia_pytriton.libs/``."""
    home = os.environ.get(TRITON_HOME_ENV)
    if home is None and not TritonInstall(DEFAULT_TRITON_HOME).binary.exists():
        import importlib.util

        spec = importlib.util.find_spec("pytriton")
        if spec is not None and spec.origin is not None:
            home = str(Path(spec.origin).parents[1])
    install = TritonInstall(Path(home) if home is not None else DEFAULT_TRITON_HOME)
    install.check()
    return install


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and that this process
    has not handed out before (a server given three ports must not get one twice)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class TritonServer:
    """A ``tritonserver`` process serving ``repository`` on ``host`` (127.0.0.1 by default).

    Args:
        repository: the model repository to serve (for this machine, a cpu profile).
        http_port, grpc_port, metrics_port: default 8000, 8001, 8002.
        log_file: where the server logs; default ``<repository>/../tritonserver.log``.
        models: load only these models (explicit model control); default all.
        startup_timeout: seconds to wait for readiness; default 180.
        stop_timeout: seconds to wait for a graceful exit before SIGKILL; default 30.
    """

    def __init__(
        self,
        repository: Path,
        host: str = "127.0.0.1",
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        log_file: Path | None = None,
        models: list[str] | None = None,
        startup_timeout: float = 180.0,
        stop_timeout: float = 30.0,
    ):
        self.repository = Path(repository).resolve()
        self.host = host
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.log_file = Path(log_file) if log_file else self.repository.parent / "tritonserver.log"
        self.models = models
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def url(self, protocol: str) -> str:
        return self.grpc_url if protocol == "grpc" else self.http_url

    def command(self, install: TritonInstall) -> list[str]:
        cmd = [
            str(install.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={install.backends}",
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--exit-on-error=true",
            "--strict-readiness=true",
            "--allow-gpu-metrics=false",
            # Decoded-image taps are megabytes: start the stub's shared memory big enough.
            "--backend-config=python,shm-default-byte-size=33554432",
        ]
        if self.models is not None:
            cmd.append("--model-control-mode=explicit")
            cmd.extend(f"--load-model={m}" for m in self.models)
        return cmd

    def environment(self, install: TritonInstall) -> dict[str, str]:
        env = dict(os.environ)
        # The Python backend stub embeds the system libpython and imports packages of the
        # first `python3` on PATH: put this interpreter's environment first.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["LD_LIBRARY_PATH"] = f"{install.libs}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}".rstrip(os.pathsep)
        return env

    def start(self) -> "TritonServer":
        install = find_install()
        for name, port in (("HTTP", self.http_port), ("gRPC", self.grpc_port), ("metrics", self.metrics_port)):
            if _port_in_use(self.host, port):
                raise ServerError(f"{name} port {self.host}:{port} is already in use (is another server running?)")
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(install), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.environment(install), start_new_session=True, preexec_fn=_stop_with(os.getpid()),
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        # Triton opens its endpoints one after the other: ready means the HTTP health check
        # answers *and* the metrics endpoint is up (load tests read it from the start).
        deadline = time.monotonic() + self.startup_timeout
        for url in (f"http://{self.http_url}/v2/health/ready", self.metrics_url):
            while not self._answers(url):
                if self.process.poll() is not None:
                    raise ServerError(f"tritonserver exited with code {self.process.returncode} while starting; "
                                      f"log {self.log_file}:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise ServerError(f"tritonserver not ready after {self.startup_timeout:.0f} s; "
                                      f"log {self.log_file}:\n{self.log_tail()}")
                time.sleep(0.25)

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """Stop the server and wait for it to exit, then reap what is left of its own process
        group (:func:`reap_group`: Python-backend stubs outlive a server that was killed);
        returns the server's exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                # Only our own session: the server and the Python-backend stubs it started.
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        reap_group(self.process.pid)
        return self.process.returncode

    def log_tail(self, lines: int = 10) -> str:
        """The server's error lines (CPU-only noise left out), then its last lines."""
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        errors = [ln for ln in text if ln.startswith("E") and not any(n in ln for n in _CPU_ONLY_NOISE)]
        return "\n".join(errors[-lines:] + ["..."] + text[-lines:])

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


STUB_SHM_PREFIX = "/dev/shm/triton_python_backend_shm_region_"
"""The shared-memory segments of the Python backend (one per model instance)."""


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _shm_segments(pids: list[int]) -> set[str]:
    segments = set()
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                path = line.split(maxsplit=5)[-1]
                if path.startswith(STUB_SHM_PREFIX):
                    segments.add(path.removesuffix(" (deleted)"))
        except OSError:
            continue
    return segments


def reap_group(pgid: int, grace: float = 2.0) -> list[int]:
    """After the server (the leader of process group ``pgid``, its own session) has exited:
    stop every process left in its group (Python-backend stubs, orphaned when the server is
    killed, ignore SIGTERM and keep their shared memory): SIGTERM, ``grace`` seconds, then
    SIGKILL; then remove the shared-memory segments they had mapped. Only this server's
    group is touched. Returns the processes found. (Linux; elsewhere nothing is found.)"""
    if not Path("/proc/self/stat").exists():
        return []
    left = group_members(pgid)
    if not left:
        return []
    segments = _shm_segments(left)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_members(pgid):
            break
    for segment in segments:
        with contextlib.suppress(OSError):
            os.unlink(segment)
    return left


def _stop_with(parent: int):
    """The server's pre-exec step: the kernel sends it SIGTERM when its parent dies, even by
    SIGKILL (a CI timeout, ``docker stop``), where no ``finally`` of ours runs: no server
    outlives the process that started it. (Linux's PR_SET_PDEATHSIG follows the *thread*
    that started the server: start it from a thread that lives as long as the server.)"""

    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None).prctl  # looked up here: between fork and exec the child only calls it
    pr_set_pdeathsig = 1

    def pre_exec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would stop us
            os._exit(1)

    return pre_exec
