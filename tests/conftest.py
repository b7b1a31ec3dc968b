"""Shared fixtures: the real photo corpus, the cpu profile, and one embedded Triton server
for the session (real tritonserver, loopback, free ports, stopped by its own PID)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.client import TritonClient
from harness.paths import DEFAULT_PHOTOS, DEFAULT_REPOSITORY
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from harness.spec import SPEC_FILENAME, load_spec

OPENCV_DATA = Path("/usr/share/doc/opencv-doc/examples/data")


# --- what each server start costs: the suite's budget is mostly server starts and requests -----

SERVER_STARTS = Path("build") / f"test-servers-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json"
"""Every tritonserver the run started in this process (each xdist worker writes its own): the
test that started it (a session fixture's first user), its repository, how many models it
loaded and the seconds to ready; written at the end of the run, read by
``benchmarks/suite_times.py --servers build/test-servers-*.json``."""
_starts: list[dict] = []
_running_test = {"nodeid": "(collection)"}


def _recording(start):
    def timed_start(self):
        began = time.monotonic()
        try:
            return start(self)
        finally:
            models = self.models if self.models is not None else [
                p.name for p in self.repository.iterdir() if (p / "config.pbtxt").exists()]
            _starts.append({"test": _running_test["nodeid"], "repository": str(self.repository),
                            "models": len(models), "seconds": round(time.monotonic() - began, 2)})
    timed_start.recorded = True
    return timed_start


if not getattr(TritonServer.start, "recorded", False):  # once, however often this module is imported
    TritonServer.start = _recording(TritonServer.start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running_test["nodeid"] = item.nodeid
    yield


def pytest_sessionfinish(session):
    if _starts:
        SERVER_STARTS.parent.mkdir(exist_ok=True)
        SERVER_STARTS.write_text(json.dumps(_starts, indent=1))


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


def pipeline_models(task: str = "classification", pipelines=("dali", "opencv")) -> list[str]:
    """What check, diagnose, accuracy and infer read of ``task``'s pipelines in this repository
    (:meth:`harness.client.TaskModels.served`): a server of a module or a test of its own starts
    with only these (about 6 s, where the whole repository takes 15-25)."""
    from harness.task import get_task

    return list(get_task(task).repository.served(pipelines))


DALI_CHECK_MODELS = pipeline_models(pipelines=("dali",))
"""What a check or a diagnosis of the DALI pipeline reads: the models to start a server of its
own with, when a test stops it."""


CLASSIFY_MODELS = pipeline_models()
"""Both classification pipelines, their taps included: what check, infer and accuracy read of
them (the detection and embedding models left out)."""


@pytest.fixture(scope="session")
def server(cpu_repository):
    triton = TritonServer(cpu_repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"


# --- servers shared by several modules, stopped after the last test that uses them -------------

SHARED_SERVERS = {"foreign_aligned", "foreign_planted", "foreign_unbatched", "own_seg_ocr"}
"""Session fixtures, one server per distinct repository, used by modules far apart in the run:
each is started by the first test that asks for it and stopped after the last one (not at
the end of the session: its memory is not held for the tests between)."""
_last_users: dict[str, pytest.Item] = {}
_open_servers: dict[str, contextlib.ExitStack] = {}


SERVER_FIXTURES = {"server", "client", "cpu_repository", "detection_server", "segmentation_server", "noisy_server",
                   "batch_dependent",
                   *SHARED_SERVERS}
"""Fixtures that start a tritonserver (``cpu_repository`` is built for one: a test given it
starts its own). A test using one is marked ``server``; so is every test that starts a server
another way (the command line without ``--url``, its own ``TritonServer``): marked by hand."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the markers, and before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
    if getattr(config, "workerinput", None) is not None:  # a pytest-xdist worker (make test: -n 2)
        _schedule(items)
    for item in items:
        for name in SHARED_SERVERS & set(getattr(item, "fixturenames", ())):
            _last_users[name] = item


MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
"""Each test module's seconds in a full run (``benchmarks/suite_times.py --write-hints``): the
order the two workers take modules in, longest first, so that no long module starts last
while the other worker sits idle. Only an order: a stale or missing figure costs balance,
never a result (an unknown module counts as long)."""


UNKNOWN_MODULE_SECONDS = 120.0
"""A module the figures do not know yet (a new one) goes early: it may be long."""


def _module(item) -> str:
    return item.nodeid.split("::")[0]


def _schedule(items) -> None:
    """The run's items as xdist's ``loadgroup`` distributes them (``make test``: ``-n 2 --dist
    loadgroup``): one group per module, so that a module's own server starts once; modules
    sharing a session server (``SHARED_SERVERS``) in one group, so that its last user (which
    stops it) runs on the worker that started it; the groups longest first."""
    parent = {}

    def root(name):
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for item in items:
        module = _module(item)
        for name in SHARED_SERVERS & set(getattr(item, "fixturenames", ())):
            parent[root(module)] = root(name)
    seconds = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.exists() else {}
    group_seconds: dict[str, float] = {}
    for module in {_module(item) for item in items}:
        group_seconds[root(module)] = group_seconds.get(root(module), 0.0) + seconds.get(module, UNKNOWN_MODULE_SECONDS)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(root(_module(item)).replace("/", ".")))
    items.sort(key=lambda item: -group_seconds[root(_module(item))])  # stable: a module keeps its order


@pytest.fixture(autouse=True)
def no_server_unless_marked(request, monkeypatch):
    """Where ``-m`` deselects the ``server`` tests (``make test-fast``), a test that starts a
    tritonserver in this process without the marker fails, naming itself: the fast loop stays
    honest about what it runs."""
    if "not server" not in (request.config.getoption("markexpr") or "") or request.node.get_closest_marker("server"):
        return

    def refuse(self, *args, **kwargs):
        pytest.fail(f"{request.node.nodeid} starts a tritonserver: mark it `server` (pytest.mark.server)", pytrace=False)

    monkeypatch.setattr(TritonServer, "start", refuse)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for name, last in _last_users.items():
        if last is item and name in _open_servers:
            _open_servers.pop(name).close()


def _shared_server(name: str, serve):
    """Enter ``serve`` (a context manager yielding a server) for the fixture ``name``; its
    teardown, or the last test using it, exits it."""
    stack = contextlib.ExitStack()
    _open_servers[name] = stack
    with stack:
        yield stack.enter_context(serve)
    _open_servers.pop(name, None)


def _serve_foreign(tmp_path_factory, name: str, **parameters):
    from tests.foreign import serve_foreign

    return serve_foreign(tmp_path_factory.mktemp(name) / "repository", DEFAULT_REPOSITORY / "classifier" / "model.onnx",
                         **parameters)


@pytest.fixture(scope="session")
def foreign_aligned(tmp_path_factory):
    """The foreign example deployment (tests/foreign.py) as checked in: aligned with its training."""
    yield from _shared_server("foreign_aligned", _serve_foreign(tmp_path_factory, "foreign_aligned"))


@pytest.fixture(scope="session")
def foreign_planted(tmp_path_factory):
    """The foreign deployment with the two classic differences planted: no resize antialias, BGR."""
    from tests.foreign import PLANTED

    yield from _shared_server("foreign_planted", _serve_foreign(tmp_path_factory, "foreign_planted", **PLANTED))


@pytest.fixture(scope="session")
def foreign_unbatched(tmp_path_factory):
    """The foreign deployment with every model at ``max_batch_size: 0``."""
    yield from _shared_server("foreign_unbatched", _serve_foreign(tmp_path_factory, "foreign_unbatched", batched=False))


@pytest.fixture(scope="session")
def own_seg_ocr(tmp_path_factory):
    """The segmentation and OCR deployments of the tests' own making (tests/own/seg_ocr.py: rembg's
    and rapidocr's shapes, aligned and planted), on one server."""
    from tests.own.seg_ocr import serve

    yield from _shared_server("own_seg_ocr", serve(tmp_path_factory.mktemp("own_seg_ocr") / "repository",
                                                   DEFAULT_REPOSITORY / "segmenter" / "model.onnx"))


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
