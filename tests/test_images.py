"""What the derived images install, checked without Docker: the layers image's package list
(docker/layers.Dockerfile) is pinned by the lock, closed under its requirements on the
image's Python, and holds what a real `harness layers` run imports."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.errors import DISTRIBUTION
from harness.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]
LAYERS_DOCKERFILE = ROOT / "docker" / "layers.Dockerfile"


def layers_packages(text: str) -> set[str]:
    [names] = re.findall(r'^ARG LAYERS_PACKAGES="([^"]+)"', text, re.M)
    return {canonicalize_name(name) for name in names.split()}


def lock_pins() -> dict[str, str]:
    return {canonicalize_name(name): version for name, version in
            re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements.lock").read_text(), re.M)}


def unmet(packages: set[str], python: str) -> dict[str, set[str]]:
    """Requirements (on ``python``, extras off) of ``packages`` that are not among them,
    read from the installed distributions' metadata: the lock's builds, as in the image."""
    import importlib.metadata

    full = load_manifest().python.version if python == "image" else python
    env = {"python_version": ".".join(full.split(".")[:2]), "python_full_version": full, "extra": ""}
    missing: dict[str, set[str]] = {}
    for name in packages:
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate(env):
                continue
            if canonicalize_name(requirement.name) not in packages:
                missing.setdefault(name, set()).add(requirement.name)
    return missing


def test_the_layers_image_installs_only_what_the_lock_pins_and_all_it_needs():
    packages, pins = layers_packages(LAYERS_DOCKERFILE.read_text()), lock_pins()
    assert packages and packages <= set(pins), packages - set(pins)  # -c requirements.lock pins every one
    assert unmet(packages, "image") == {}  # --no-deps: every dependency is on the list itself
    assert "tensorrt" not in packages and "torch" not in packages  # the image's own TensorRT; no PyTorch


def test_the_closure_check_sees_a_missing_dependency():
    packages = layers_packages(LAYERS_DOCKERFILE.read_text())
    assert unmet(packages - {"mdurl"}, "image") == {"markdown-it-py": {"mdurl"}}


IMPORTED = """
import atexit, importlib.metadata, json, sys
def dump():
    top = {name.split('.')[0] for name in sys.modules}
    dists = importlib.metadata.packages_distributions()
    print(json.dumps(sorted({d for t in top for d in dists.get(t, [])})), file=sys.stderr)
atexit.register(dump)
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def layers_run_imports(photos_dir, tmp_path_factory) -> set[str]:
    """The distributions a real `harness layers` run (onnx vs onnx-fp16, two photos) imported."""
    from tests.conftest import copy_photos

    work = tmp_path_factory.mktemp("layers")
    images = copy_photos(photos_dir, ["squirrel_cls.jpg", "baboon.jpg"], work / "images")
    run = subprocess.run([sys.executable, "-c", IMPORTED, "layers", str(images), "--executions", "onnx,onnx-fp16",
                          "--report", str(work / "report")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    return {canonicalize_name(name) for name in json.loads(run.stderr.strip().splitlines()[-1])}


def test_the_layers_image_holds_what_a_layers_run_imports(layers_run_imports):
    packages = layers_packages(LAYERS_DOCKERFILE.read_text())
    # the harness is mounted (its distribution's name or its package's); setuptools only shows through its
    # distutils shim (_distutils_hack)
    assert layers_run_imports - {"harness", DISTRIBUTION, "setuptools"} <= packages, layers_run_imports - packages
    assert {"onnxruntime", "onnxconverter-common", "polygraphy"} <= layers_run_imports  # the run did run


def test_the_torch_execution_without_pytorch_is_a_clean_refusal(photos_dir, tmp_path):
    # as in the layers image, which has no PyTorch (an import of it fails)
    from tests.conftest import copy_photos

    images = copy_photos(photos_dir, ["squirrel_cls.jpg"], tmp_path / "images")
    code = "import sys; sys.modules['torch'] = None\nfrom harness.cli import main\nsys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, "layers", str(images), "--executions", "torch,onnx",
                          "--report", str(tmp_path / "report")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "execution torch needs PyTorch" in run.stderr
