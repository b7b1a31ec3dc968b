"""``python3 -m harness.preflight --record`` the way the Triton image runs it: the package
installed (not editable) into a fresh environment, its source tree gone, run from a folder
that is not the checkout, against the real embedded server. There, ``PROJECT_ROOT`` is the
environment's ``lib/`` folder and no ``data/photos`` exists: the record must come from
the cpu record's own bytes (docker/triton.Dockerfile installs the package the same way)."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.client import TritonClient
from harness.paths import PACKAGE_DATA
from harness.preflight.known_answers import META, load, read_photos, record
from harness.preprocessing.dali_graph import production_arguments

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "harness", "loadtest", *PACKAGE_DATA)
"""What docker/triton.Dockerfile copies into the image and installs (the model repository's text files
only, there: its model files are not read here)."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh virtualenv holding the harness as a regular install, whose
    source copy was removed after installing. The virtualenv's other packages (numpy,
    tritonclient, DALI) are reached through a path line, which runs no .pth file: not the
    editable install's finder, which would bring the checkout back."""
    base = tmp_path_factory.mktemp("fresh")
    env = base / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = base / "src"
    source.mkdir()
    for name in COPIED:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                          "--ignore-installed", "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, timeout=600, env=clean_env(), cwd=base)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    shutil.rmtree(source)
    return python


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run(python: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=clean_env(), cwd=cwd)


def test_the_package_runs_from_its_install_not_from_the_checkout(installed, tmp_path):
    where = run(installed, tmp_path, "-c", "import harness, harness.paths as p; print(harness.__file__); "
                                           "print(p.DEFAULT_PHOTOS.is_dir())")
    assert where.returncode == 0, where.stderr
    module, photos_found = where.stdout.split()
    assert Path(module).is_relative_to(installed.parents[1]) and not Path(module).is_relative_to(ROOT)
    assert photos_found == "False"  # as in the image: no data/photos beside the installed package


def test_record_in_the_installed_package_takes_the_cpu_records_bytes(installed, server, photos_dir, tmp_path):
    known = tmp_path / "preflight"  # what compose mounts at /preflight: make setup's cpu record
    with TritonClient(server.url("grpc"), "grpc") as client:
        record(client, read_photos(photos_dir), known, production_arguments(ROOT / "model_repository"))
    before = load(known)
    work = tmp_path / "cwd"
    work.mkdir()
    recorded = run(installed, work, "-m", "harness.preflight", "--url", server.url("grpc"), "--protocol", "grpc",
                   "--in-server-env", "--repository", ROOT / "model_repository", "--known-answers", known,
                   "--manifest", ROOT / "deploy" / "versions.toml", "--record")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "known answers of 4 photos recorded from the cpu profile" in recorded.stdout
    after = load(known)
    assert after.images == before.images  # the very bytes of the record, read back from it
    assert list(after.stages) == list(before.stages)


def test_record_in_the_installed_package_without_a_cpu_record_says_how_to_make_one(installed, server, tmp_path):
    refused = run(installed, tmp_path, "-m", "harness.preflight", "--url", server.url("grpc"), "--record",
                  "--repository", ROOT / "model_repository", "--known-answers", tmp_path / "preflight",
                  "--manifest", ROOT / "deploy" / "versions.toml")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "no cpu record in" in line and "make setup" in line
    assert not (tmp_path / "preflight" / META).exists()
