"""A server to talk to: an embedded one (the cpu profile, started and stopped here) or ``--url``.

Used by the commands, loadtest and the benchmarks alike.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from harness.client import TritonClient
from harness.errors import UsageError
from harness.paths import BUILD_DIR

if TYPE_CHECKING:
    from harness.server import TritonServer


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def embedded_server(repository: Path, spec: Path | None = None,
                    log: Callable[[str], None] = _stderr) -> Iterator["TritonServer"]:
    """Build the cpu profile of ``repository`` (with ``spec``, default the repository's own)
    in a temporary directory under ``build/`` and serve it on free loopback ports; ``log``
    gets one line when starting and one when ready (default: stderr)."""
    from harness.repository import build_cpu_profile
    from harness.server import TritonServer, free_port

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embedded-", dir=BUILD_DIR) as tmp:
        repo = build_cpu_profile(repository, Path(tmp) / "repository", spec)
        server = TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
        log("starting the embedded Triton server (cpu profile)")
        server.start()
        try:
            log(f"embedded Triton server ready: HTTP {server.http_url}, gRPC {server.grpc_url}")
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def connect(url: str | None, protocol: str, timeout: float, repository: Path, spec: Path | None = None,
            log: Callable[[str], None] = _stderr) -> Iterator[TritonClient]:
    """A ready client to ``url``, or (``url`` None) to an embedded server of ``repository``
    started for the block. Raises :class:`UsageError` if the server is not ready."""
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(embedded_server(repository, spec, log)).url(protocol)
        client = stack.enter_context(TritonClient(url, protocol, timeout=timeout))
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({protocol}) is not reachable or not ready")
        yield client
