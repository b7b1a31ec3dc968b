"""The installable tool (issue 56): the wheel built from this checkout, its metadata and the
files it ships, and that wheel installed into an environment of its own, run from a folder
outside the checkout with nothing of the checkout importable: ``harness model export`` writes
the project's models there, ``check`` serves them with the embedded server, defaults write
under that folder, and a missing extra is named in one line.

The environment: a new virtualenv (``--without-pip``) whose only borrowed paths are the project
environment's site-packages and its ``pytriton`` folder, named in a ``.pth`` file. That is the
``server`` extra's layout (pytriton importable as a package) and the embedded server's models
see it too: the Python-backend stub ignores PYTHONPATH but reads the first ``python3`` on PATH,
this environment's. Paths a ``.pth`` file names are not site folders, so the editable install's
finder (a ``.pth`` of the project environment) never runs: the checkout's ``harness`` is not
importable there.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import harness
from harness.errors import DISTRIBUTION, ERROR_STATUS, UsageError, exit_status_of, install_hint, message_of
from harness.paths import PACKAGE_DATA, PROJECT_ROOT, no_repository, package_data_files
from harness.segmentation.model import WHEEL_DIR, WHEEL_FILE
from harness.session import Session

PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg")


def run(command, cwd: Path, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, PROJECT_ROOT],
                cwd=out)
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("*.whl")
    return found


def test_the_wheel_names_itself_and_declares_ranges(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(archive.read(metadata).decode())
    assert meta["Name"] == DISTRIBUTION != "harness" and meta["Version"] == harness.__version__ != "0.1.0"
    assert meta["License-Expression"] == "Apache-2.0" and set(meta["Requires-Python"].split(",")) == {">=3.11", "<3.13"}
    assert {"Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12"} <= set(meta.get_all("Classifier"))
    requires = meta.get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    # exact only where exactness is the point (tests/test_manifest.py holds each to the manifest)
    exact = {r.split("==")[0] for r in core if "==" in r}
    assert exact == {"nvidia-dali-cuda130", "nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "rapidocr"}
    extras = {re.search(r'extra == "(\w+)"', r).group(1) for r in requires if "extra ==" in r}
    assert {"server", "frameworks", "loadtest", "layers", "gpu"} <= extras
    assert not any(re.match(r"(timm|transformers|locust|polygraphy|tensorrt|nvidia-pytriton)\b", r) for r in core)


def test_the_wheel_ships_what_a_job_reads_as_the_checkout_has_it(wheel):
    with zipfile.ZipFile(wheel) as archive:
        data = {n.removeprefix("harness/_data/"): archive.read(n) for n in archive.namelist() if n.startswith("harness/_data/")}
        names = archive.namelist()
    assert sorted(data) == package_data_files(PROJECT_ROOT)
    assert {"deploy/versions.toml", "docker/build_engine.py", "model_repository/preprocessing.toml",
            "model_repository/preprocess_dali/1/dali.py", "model_repository/classifier/config.pbtxt"} <= set(data)
    assert all(data[name] == (PROJECT_ROOT / name).read_bytes() for name in data)
    assert not any(n.endswith((".onnx", ".plan")) for n in names)  # models are exported on demand, never shipped
    assert all(entry.split("/")[0] in {"model_repository", "docker", "deploy"} for entry in PACKAGE_DATA)


def test_the_sdist_carries_them_too(tmp_path):
    """A wheel built from the source distribution (``python -m build``'s way) ships the same files."""
    built = run([sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"],
                cwd=PROJECT_ROOT)
    assert built.returncode == 0, built.stderr
    with tarfile.open(tmp_path / built.stdout.strip().splitlines()[-1]) as archive:
        top = f"{DISTRIBUTION.replace('-', '_')}-{harness.__version__}/"
        members = {m.name.removeprefix(top) for m in archive.getmembers() if m.isfile()}
    assert set(package_data_files(PROJECT_ROOT)) <= members


def test_a_missing_repository_says_how_to_get_one(tmp_path):
    with pytest.raises(UsageError, match="no such model repository .`harness model export` writes"):
        Session(tmp_path / "model_repository").spec


def test_a_missing_extra_is_named_in_one_line():
    """In the checkout the extras are read from pyproject.toml (installed: the metadata, below)."""
    missing = ModuleNotFoundError("No module named 'timm'", name="timm")
    assert exit_status_of(missing) == ERROR_STATUS
    assert message_of(missing) == f"timm is not installed (the harness's frameworks extra): {install_hint('frameworks')}"
    assert exit_status_of(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None  # a dependency: a bug


@pytest.fixture(scope="module")
def user_env(wheel, tmp_path_factory) -> Path:
    """A virtualenv holding the wheel, the project environment's packages borrowed (see the module)."""
    env = tmp_path_factory.mktemp("user-env")
    made = run([sys.executable, "-m", "venv", "--without-pip", env], cwd=env)
    assert made.returncode == 0, made.stderr
    python = env / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=env).stdout.strip())
    (site / "borrowed.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{Path(sys.prefix) / 'pytriton'}\n")
    installed = run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                     "--disable-pip-version-check", wheel], cwd=env)
    assert installed.returncode == 0, installed.stderr
    return env


@pytest.mark.server
@pytest.mark.slow
def test_the_installed_wheel_exports_serves_and_checks_from_the_users_folder(user_env, photos_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HARNESS_TRITON_HOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{user_env / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # where it is, where its defaults are, and a deployment's images, written from what the wheel ships
    # (its serving Dockerfile, engine builder and manifest), the compose file naming no path outside the folder
    where = run([user_env / "bin" / "python", "-c", "import harness, harness.paths as p; from pathlib import Path; "
                 "from harness.deploy.compose import compose_file; from harness.deploy.standalone import write_images; "
                 "from harness.manifest import load_manifest; print(harness.__file__, p.INSTALLED, p.DEFAULT_REPOSITORY, "
                 "p.BUILD_DIR, p.packaged('deploy/versions.toml')); Path('my-deployment').mkdir(); "
                 "write_images(Path('my-deployment'), load_manifest()); print(compose_file([], 'mine'))"],
                cwd=tmp_path, env=env)
    assert where.returncode == 0, where.stderr
    package, installed, repository, build, manifest = where.stdout.splitlines()[0].split()
    assert Path(package).is_relative_to(user_env) and installed == "True"
    assert (repository, build) == ("model_repository", "build") and Path(manifest).is_relative_to(user_env)
    assert "source: /" not in where.stdout and "../" not in where.stdout, where.stdout
    written = tmp_path / "my-deployment"
    assert (written / "build_engine.py").read_bytes() == (PROJECT_ROOT / "docker" / "build_engine.py").read_bytes()
    assert "FROM " in (written / "Dockerfile").read_text() and "/tmp/wheels/*.whl" in (written / "Dockerfile").read_text()

    # the segmenter's wheel, as `harness model export` would download it (no download in the suite)
    (tmp_path / WHEEL_DIR).mkdir(parents=True)
    (tmp_path / WHEEL_DIR / WHEEL_FILE).write_bytes((PROJECT_ROOT / WHEEL_DIR / WHEEL_FILE).read_bytes())
    photos = tmp_path / "my-photos"
    photos.mkdir()
    for name in PHOTOS:
        (photos / name).write_bytes((photos_dir / name).read_bytes())
    harness_command = user_env / "bin" / "harness"
    before = run([harness_command, "check", "my-photos"], cwd=tmp_path, env=env)  # the first thing a user may try
    assert before.returncode == ERROR_STATUS and f"error: {no_repository(Path('model_repository'))}" in before.stderr
    exported = run([harness_command, "model", "export"], cwd=tmp_path, env=env)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "model_repository" / "classifier" / "model.onnx").is_file()
    checked = run([harness_command, "check", "my-photos", "--format", "md"], cwd=tmp_path, env=env)  # no report.html: 4 s
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Top-1 agreement: **100.0%** (3 of 3 images)" in checked.stdout
    assert (tmp_path / "reports" / "check" / "report.md").is_file()
    assert not list((tmp_path / "build").glob("embedded-*"))  # the server's scratch repository, under the folder, removed
    assert not [p for p in user_env.rglob("*") if p.name in ("build", "reports", "model_repository") and "_data" not in p.parts]

    # a job whose extra is missing (here Locust, made unimportable) says which to install, in one line
    missing = run([user_env / "bin" / "python", "-c", "import sys; sys.modules['locust'] = None; from harness.cli import main; "
                   "sys.exit(main(['loadtest', '--url', '127.0.0.1:1']))"], cwd=tmp_path, env=env)
    assert missing.returncode == ERROR_STATUS
    assert f"locust is not installed (the harness's loadtest extra): {install_hint('loadtest')}" in missing.stderr
