"""deploy/versions.toml is the one source of the production versions: the Dockerfiles, the
compose images, the DALI, nvImageCodec, nvJPEG and TensorRT pins and the installed DALI and
decode stack follow it, and every DALI argument the pipeline uses exists in that DALI. The
CPU-side proofs count only on those versions."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.manifest import ManifestError, decode_stack_versions, load_manifest, same_version
from harness.preprocessing.dali_graph import missing_arguments, pipeline_arguments, production_pipelines

ROOT = Path(__file__).resolve().parents[1]
VERSIONED = ("docker/triton.Dockerfile", "docker/layers.Dockerfile", "docker-compose.yml", "pyproject.toml",
             "requirements.lock", "Makefile")


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
    # the server's numpy, and the order its Python finds packages in (site-packages before
    # DALI's wheel folder, whose unpinned numpy would win otherwise)
    expect("docker/triton.Dockerfile", r"^ARG NUMPY_VERSION=(\S+)", manifest.numpy.version)
    expect("docker/triton.Dockerfile", r"numpy==(\S+)", "${NUMPY_VERSION}")
    expect("pyproject.toml", r'"numpy==([^"]+)"', manifest.numpy.version)
    expect("requirements.lock", r"^numpy==(\S+)", manifest.numpy.version)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text["docker/triton.Dockerfile"], re.M))
    if args.get("IMAGE_PYTHONPATH", "").split(":") != list(manifest.pythonpath.image):
        found.append(f"docker/triton.Dockerfile: IMAGE_PYTHONPATH {args.get('IMAGE_PYTHONPATH')} is not the base "
                     f"image's documented {':'.join(manifest.pythonpath.image)}")
    python = ".".join(manifest.python.version.split(".")[:2])
    if args.get("SITE_PACKAGES") != manifest.pythonpath.site_packages or f"/python{python}/" not in args["SITE_PACKAGES"]:
        found.append(f"docker/triton.Dockerfile: SITE_PACKAGES {args.get('SITE_PACKAGES')} is not the manifest's "
                     f"{manifest.pythonpath.site_packages} (Python {python})")
    pythonpath = [re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), entry)
                  for value in re.findall(r"^ENV PYTHONPATH=(\S+)", text["docker/triton.Dockerfile"], re.M)
                  for entry in value.split(":")]
    if pythonpath != list(manifest.pythonpath.ordered):
        found.append(f"docker/triton.Dockerfile: PYTHONPATH {pythonpath} instead of {list(manifest.pythonpath.ordered)}")
    expect("docker-compose.yml", r"image:\s*(nvcr\.io/nvidia/tensorrt:\S+)", manifest.tensorrt.image)
    expect("docker-compose.yml", r"image:\s*harness-triton:(\S+)", manifest.release)
    expect("docker/layers.Dockerfile", r"^FROM\s+(\S+)", manifest.tensorrt.image)  # trt layers in the engine's TensorRT
    expect("docker-compose.yml", r"image:\s*harness-layers:(\S+)", manifest.release)
    expect("pyproject.toml", r'"(nvidia-dali-cuda\d+==[^"]+)"', manifest.dali_requirement)
    expect("requirements.lock", r"^(nvidia-dali-cuda\d+==\S+)", manifest.dali_requirement)
    expect("pyproject.toml", r'"(tensorrt==[^"]+)"', manifest.tensorrt_requirement)  # the gpu extra
    for requirement, pattern in zip(manifest.decode_stack_requirements, (r"nvidia-nvimgcodec-cu\d+==", r"nvidia-nvjpeg==")):
        expect("pyproject.toml", rf'"({pattern}[^"]+)"', requirement)
        expect("requirements.lock", rf"^({pattern}\S+)", requirement)
    expect("Makefile", r"^TRITON_WHEEL\s*:=\s*(\S+)", manifest.embedded.wheel)
    expect("pyproject.toml", r'"(nvidia-pytriton==[^"]+)"', manifest.embedded.wheel)  # the server extra
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
    ("docker/layers.Dockerfile", "tensorrt:26.06-py3", "tensorrt:26.05-py3"),
    ("docker-compose.yml", "harness-layers:26.06", "harness-layers:latest"),
    ("pyproject.toml", "nvidia-dali-cuda130==2.1.1", "nvidia-dali-cuda130==2.4.0"),
    ("requirements.lock", "nvidia-dali-cuda130==2.1.1", "nvidia-dali-cuda120==2.1.1"),
    ("pyproject.toml", "tensorrt==11.0.0.*", "tensorrt==10.7.0"),  # the gpu extra's old pin
    ("requirements.lock", "nvidia-nvjpeg==13.3.2.43", "nvidia-nvjpeg==13.2.3.58"),
    ("pyproject.toml", "nvidia-nvimgcodec-cu13==0.7.0.11", "nvidia-nvimgcodec-cu13==0.9.0.20"),
    ("pyproject.toml", '"nvidia-pytriton==0.7.0"', '"nvidia-pytriton==0.8.0"'),  # the server extra
    ("pyproject.toml", '"numpy==1.26.4"', '"numpy==2.2.6"'),
    ("docker/triton.Dockerfile", "ARG NUMPY_VERSION=1.26.4", "ARG NUMPY_VERSION=2.2.6"),
    ("docker/triton.Dockerfile", "numpy==${NUMPY_VERSION}", "numpy==2.2.6"),
    ("requirements.lock", "numpy==1.26.4", "numpy==2.2.6"),
    # the base image's order left as it is: DALI's wheel folder (and its numpy) first
    ("docker/triton.Dockerfile", "ENV PYTHONPATH=${SITE_PACKAGES}:${IMAGE_PYTHONPATH}",
     "ENV PYTHONPATH=${IMAGE_PYTHONPATH}:${SITE_PACKAGES}"),
    ("docker/triton.Dockerfile", "ENV PYTHONPATH=${SITE_PACKAGES}:${IMAGE_PYTHONPATH}", ""),
    ("docker/triton.Dockerfile", "ARG SITE_PACKAGES=/usr/local/lib/python3.12/dist-packages",
     "ARG SITE_PACKAGES=/usr/local/lib/python3.11/dist-packages"),
    ("deploy/versions.toml", 'image = ["/opt/tritonserver/backends/dali/wheel/dali"]',
     'image = ["/opt/tritonserver/backends/dali/wheel/dali", "/opt/other"]'),
])
def test_a_drifted_file_is_caught(tmp_path, where, old, new):
    for name in (*VERSIONED, "deploy/versions.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    path = tmp_path / where
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    # (a drifted manifest is seen where the file that no longer follows it is)
    assert any(d.startswith(where if where != "deploy/versions.toml" else "docker/") for d in disagreements(tmp_path))


def test_the_virtualenv_runs_the_manifests_dali(manifest):
    import nvidia.dali

    assert importlib.metadata.version(manifest.dali.wheel) == manifest.dali.version
    assert nvidia.dali.__version__ == manifest.dali.version


def test_the_virtualenv_runs_the_manifests_decode_stack(manifest):
    for component in (manifest.nvimgcodec, manifest.nvjpeg):
        assert importlib.metadata.version(component.wheel) == component.version
    # and DALI loaded those very libraries (it reports them without a GPU)
    found = decode_stack_versions()
    assert same_version(found["nvImageCodec"], manifest.nvimgcodec.version)  # DALI says 0.7.0 of 0.7.0.11
    assert same_version(found["nvJPEG"], manifest.nvjpeg.version)


def _in_a_fresh_process(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_torchvision_imported_first_takes_dalis_nvjpeg_unless_the_harness_loads_it(manifest):
    """torchvision's wheel bundles an older nvJPEG under DALI's soname: whichever loads first is
    DALI's. The version printed stays the server's, and every harness path that imports
    torchvision loads DALI's first."""
    pinned = manifest.nvjpeg.version
    shadowed = _in_a_fresh_process("import torchvision\n"
                                   "from harness.manifest import loaded_decode_stack; print(loaded_decode_stack()['nvJPEG'])")
    assert not same_version(shadowed, pinned)  # the hazard itself: should torchvision drop it, this test goes
    reported = _in_a_fresh_process("import torchvision\n"
                                   "from harness.manifest import decode_stack_versions; print(decode_stack_versions()['nvJPEG'])")
    assert same_version(reported, pinned)
    through_the_harness = _in_a_fresh_process(
        "from harness.reference import BUILT_IN\nfrom harness.spec import load_spec\n"
        "BUILT_IN['torchvision'](load_spec('model_repository/preprocessing.toml').preprocess)\n"
        "import torchvision.io\n"
        "from harness.manifest import loaded_decode_stack; print(loaded_decode_stack()['nvJPEG'])")
    assert same_version(through_the_harness, pinned)


def test_the_gpu_runner_refuses_another_nvjpeg_than_the_servers(manifest):
    refused = subprocess.run([sys.executable, "-c", "import torchvision\n"
                              "from harness.training.preprocess import require_dalis_nvjpeg; require_dalis_nvjpeg()"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1
    assert f"not the {manifest.nvjpeg.version} the server's DALI runs" in refused.stderr


def test_every_manifest_version_names_its_source(manifest):
    for component in (manifest.server, manifest.dali, manifest.tensorrt, manifest.cuda, manifest.python,
                      manifest.ubuntu, manifest.nvimgcodec, manifest.nvjpeg, manifest.embedded, manifest.numpy):
        assert component.version and component.source
    assert manifest.pythonpath.source and manifest.pythonpath.ordered[0] == manifest.pythonpath.site_packages
    assert manifest.tensorrt_onnx.source and manifest.tensorrt_onnx.onnx


def test_the_virtualenv_runs_the_manifests_numpy(manifest):
    import numpy

    assert numpy.__version__ == manifest.numpy.version


def test_a_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="missing"):
        load_manifest(tmp_path / "versions.toml")


def test_the_mixed_pipelines_use_only_arguments_the_production_dali_has(repository):
    pipes = production_pipelines(repository)
    assert set(pipes) == {"preprocess_dali", "preprocess_dali_stages", "detect_preprocess_dali",
                          "detect_preprocess_dali_stages", "ocr_decode_dali", "ocr_preprocess_dali",
                          "segment_preprocess_dali", "segment_preprocess_dali_stages"}
    for name, pipe in pipes.items():
        serialized = pipe.serialize()  # an unknown argument would already raise here
        arguments = pipeline_arguments(pipe)
        if name == "ocr_preprocess_dali":  # no decode: each word's region of the image ocr_decode_dali decoded
            assert b"gpu" in serialized and "experimental__decoders__Image" not in arguments
        else:
            assert b"mixed" in serialized
            assert "adjust_orientation" in arguments["experimental__decoders__Image"]
        assert missing_arguments(arguments) == []
    # the page ocr_dali cuts its words from: the detector's decode, with its arguments, and nothing after it
    decoder = pipeline_arguments(pipes["detect_preprocess_dali_stages"])["experimental__decoders__Image"]
    assert pipeline_arguments(pipes["ocr_decode_dali"]) == {"ExternalSource": [], "experimental__decoders__Image": decoder}


def test_a_spec_that_turns_the_hardware_jpeg_engine_off_serializes_with_the_production_dali(repository, tmp_path):
    # decode.hw_decoder_load reaches fn.experimental.decoders.image, which has the argument
    # in DALI 2.1.1; left unset, the pipeline does not name it (DALI's default applies)
    for model in ("preprocess_dali", "preprocess_dali_stages"):
        (tmp_path / model / "1").mkdir(parents=True)
        shutil.copy(repository / model / "1" / "dali.py", tmp_path / model / "1" / "dali.py")
        shutil.copy(repository / model / "config.pbtxt", tmp_path / model / "config.pbtxt")  # names the spec it reads
    spec_text = (repository / "preprocessing.toml").read_text()
    (tmp_path / "preprocessing.toml").write_text(spec_text.replace("[decode]\n", "[decode]\nhw_decoder_load = 0\n"))
    for repo, named in ((tmp_path, True), (repository, False)):
        for pipe in production_pipelines(repo).values():
            pipe.serialize()
            arguments = pipeline_arguments(pipe)
            assert ("hw_decoder_load" in arguments.get("experimental__decoders__Image", ())) is named
            assert missing_arguments(arguments) == []


def test_the_schema_check_sees_what_the_legacy_decoder_lacks():
    # In this DALI, fn.decoders.image is the legacy decoder: the argument the gpu profile
    # could not load with (Triton 24.12) is reported, as is an operator that does not exist.
    assert missing_arguments({"decoders__Image": ["adjust_orientation", "output_type"], "NoSuchOp": ["x"]}) == [
        "decoders__Image.adjust_orientation", "NoSuchOp"]
