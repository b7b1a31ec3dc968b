"""Shared fixtures: the real photo corpus, the cpu profile, and one embedded Triton server
for the session (real tritonserver, loopback, free ports, stopped by its own PID)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.client import TritonClient
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from harness.spec import SPEC_FILENAME, load_spec

OPENCV_DATA = Path("/usr/share/doc/opencv-doc/examples/data")


@pytest.fixture(autouse=True)
def no_gevent_patching(request):
    """Stops the suite after the test in which gevent monkey-patched this process (importing
    Locust, or loadtest/locustfile.py, does): threads become greenlets, and a later test whose
    thread never yields hangs the whole suite. Locust runs in its own process (tests/loadtest). The
    session stops at once: every later test would run in a process that is no longer itself."""
    yield
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_anything_patched():
        pytest.exit(f"{request.node.nodeid} gevent-patched the test process (import loadtest.responses, "
                    "not the locustfile)", returncode=1)


@pytest.fixture(scope="session")
def repository() -> Path:
    return DEFAULT_REPOSITORY


@pytest.fixture(scope="session")
def spec(repository):
    return load_spec(repository / SPEC_FILENAME)


@pytest.fixture(scope="session")
def photos_dir() -> Path:
    assert DEFAULT_PHOTOS.is_dir() and any(DEFAULT_PHOTOS.iterdir()), "run `make setup` to gather the photo corpus"
    return DEFAULT_PHOTOS


@pytest.fixture(scope="session")
def photo(photos_dir):
    """Bytes of a named photo of the corpus."""
    return lambda name: (photos_dir / name).read_bytes()


@pytest.fixture(scope="session")
def cpu_repository(repository, tmp_path_factory) -> Path:
    return build_cpu_profile(repository, tmp_path_factory.mktemp("profile") / "repository")


@pytest.fixture(scope="session")
def server(cpu_repository):
    triton = TritonServer(cpu_repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


@pytest.fixture(scope="session", params=["http", "grpc"])
def client(request, server):
    with TritonClient(server.url(request.param), request.param) as c:
        yield c


def copy_photos(photos_dir: Path, names, directory: Path) -> Path:
    """``directory`` (created if needed) holding copies of the named corpus photos."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(photos_dir / name, directory / name)
    return directory


def encode(image, fmt: str = "JPEG", **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    return buf.getvalue()


@pytest.fixture(scope="session")
def squirrel_image():
    from PIL import Image

    with Image.open(OPENCV_DATA / "squirrel_cls.jpg") as im:
        return im.convert("RGB")


def random_bytes(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
