"""deploy/versions.toml is the one source of the production versions: the Dockerfiles, the
compose images, the DALI pin and the installed DALI follow it, and every DALI argument the
pipeline uses exists in that DALI. The CPU-side proofs count only on those versions."""

import importlib.metadata
import re
import shutil
from pathlib import Path

import pytest

from harness.manifest import ManifestError, load_manifest
from harness.preprocessing.dali_graph import missing_arguments, pipeline_arguments, production_pipelines

ROOT = Path(__file__).resolve().parents[1]
VERSIONED = ("docker/triton.Dockerfile", "docker-compose.yml", "pyproject.toml", "requirements.lock", "Makefile")


def disagreements(root: Path) -> list[str]:
    """Every place under ``root`` that names a production version other than the manifest's."""
    manifest = load_manifest(root / "deploy" / "versions.toml")
    text = {name: (root / name).read_text() for name in VERSIONED}
    found = []

    def expect(where: str, pattern: str, wanted: str) -> None:
        values = set(re.findall(pattern, text[where], re.M))
        if values != {wanted}:
            found.append(f"{where}: {sorted(values)} instead of {wanted}")

    expect("docker/triton.Dockerfile", r"^FROM\s+(\S+)", manifest.server.image)
    expect("docker-compose.yml", r"image:\s*(nvcr\.io/nvidia/tensorrt:\S+)", manifest.tensorrt.image)
    expect("docker-compose.yml", r"image:\s*harness-triton:(\S+)", manifest.release)
    expect("pyproject.toml", r'"(nvidia-dali-cuda\d+==[^"]+)"', manifest.dali_requirement)
    expect("requirements.lock", r"^(nvidia-dali-cuda\d+==\S+)", manifest.dali_requirement)
    expect("Makefile", r"^TRITON_WHEEL\s*:=\s*(\S+)", manifest.embedded.wheel)
    for image in (manifest.server.image, manifest.tensorrt.image):
        if not image.endswith(f":{manifest.release}-py3"):
            found.append(f"deploy/versions.toml: {image} is not release {manifest.release}")
    return found


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


def test_everything_follows_the_manifest():
    assert disagreements(ROOT) == []


@pytest.mark.parametrize("where, old, new", [
    ("docker/triton.Dockerfile", "tritonserver:26.06-py3", "tritonserver:24.12-py3"),
    ("docker-compose.yml", "tensorrt:26.06-py3", "tensorrt:26.05-py3"),
    ("pyproject.toml", "nvidia-dali-cuda130==2.1.1", "nvidia-dali-cuda130==2.4.0"),
    ("requirements.lock", "nvidia-dali-cuda130==2.1.1", "nvidia-dali-cuda120==2.1.1"),
])
def test_a_drifted_file_is_caught(tmp_path, where, old, new):
    for name in (*VERSIONED, "deploy/versions.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    path = tmp_path / where
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    assert any(d.startswith(where) for d in disagreements(tmp_path))


def test_the_virtualenv_runs_the_manifests_dali(manifest):
    import nvidia.dali

    assert importlib.metadata.version(manifest.dali.wheel) == manifest.dali.version
    assert nvidia.dali.__version__ == manifest.dali.version


def test_every_manifest_version_names_its_source(manifest):
    for component in (manifest.server, manifest.dali, manifest.tensorrt, manifest.cuda, manifest.python,
                      manifest.ubuntu, manifest.embedded):
        assert component.version and component.source


def test_a_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="missing"):
        load_manifest(tmp_path / "versions.toml")


def test_the_mixed_pipelines_use_only_arguments_the_production_dali_has(repository):
    pipes = production_pipelines(repository)
    assert set(pipes) == {"preprocess_dali", "preprocess_dali_stages"}
    for pipe in pipes.values():
        serialized = pipe.serialize()  # an unknown argument would already raise here
        assert b"mixed" in serialized
        arguments = pipeline_arguments(pipe)
        assert "adjust_orientation" in arguments["experimental__decoders__Image"]
        assert missing_arguments(arguments) == []


def test_the_schema_check_sees_what_the_legacy_decoder_lacks():
    # In this DALI, fn.decoders.image is the legacy decoder: the argument the gpu profile
    # could not load with (Triton 24.12) is reported, as is an operator that does not exist.
    assert missing_arguments({"decoders__Image": ["adjust_orientation", "output_type"], "NoSuchOp": ["x"]}) == [
        "decoders__Image.adjust_orientation", "NoSuchOp"]
