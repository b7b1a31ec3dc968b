"""`harness deploy --name`, without a server: the user's names on every model, several deployments in
one folder (each with its spec and its record, which the harness reads), a name that would write over
a model refused in one line, and the cpu profile of such a folder; the same name again with the same
preprocessing writes the model's next version beside the first (Triton's version folders), with other
preprocessing or other classes it is refused."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import compose
import pytest
from kubernetes_validate import utils as k8s_schemas

from harness.client import TaskModels
from harness.deploy.readme import readme, set_aside_proof
from harness.deploy.standalone import SERVING_DOCKERFILE, engine_dockerfile, serving_dockerfile
from harness.engine_input import read_engine_input
from harness.manifest import load_manifest
from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from harness.repository import build_cpu_profile, load_config, load_repository
from harness.session import Session
from harness.spec import load_spec
from harness.task import named_deployments, repository_models
from tests.commands import harness
from tests.deploy.classifiers import another_version

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
LABELS = DEFAULT_REPOSITORY / "classifier" / "labels.txt"
PRESET, STRETCH = "torchvision:ResNet50_Weights.IMAGENET1K_V2", "torchvision:ViT_B_16_Weights.IMAGENET1K_V1"
COMPOSE = Path(compose.__file__).parent / "docker-compose"
ROLES = ["{}", "{}_model", "{}_preprocess_dali", "{}_preprocess_dali_stages", "{}_preprocess_dali_taps",
         "{}_validate_image"]


def deploy(out: Path, name: str, reference: str = PRESET):
    return harness("deploy", ONNX, "--reference", reference, "--out", out, "--no-check", f"--name={name}",
                   "--class-names", LABELS)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Two deployments of their own names in one folder: `lite` (ResNet-50's preset) and `other`."""
    out = tmp_path_factory.mktemp("named") / "repository"
    for name in ("lite", "other"):
        result = deploy(out, name)
        assert result.returncode == 0, result.stdout + result.stderr
    return out


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_model_has_the_users_name_and_reads_the_deployments_spec(two):
    models = sorted(role.format(name) for name in ("lite", "other") for role in ROLES)
    configs = load_repository(two)
    assert sorted(configs) == models
    for name in ("lite", "other"):
        steps = [s.model_name for s in configs[name].ensemble_scheduling.step]
        assert steps == [f"{name}_validate_image", f"{name}_preprocess_dali", f"{name}_model"]
        reads = {m: c.parameters["spec"].string_value for m, c in configs.items()
                 if m.startswith(f"{name}_") and c.platform != "ensemble"}
        assert set(reads.values()) == {f"{name}.toml"}, reads
        assert load_spec(two / f"{name}.toml").preprocess.resize.size == (232,)
        assert load_config(two / f"{name}_model" / "config.pbtxt").platform == "tensorrt_plan"
    assert not (two / "preprocessing.toml").exists() and not (two / "classify_dali").exists()


def test_the_records_say_what_each_deployment_is_and_the_harness_reads_them(two):
    record = json.loads((two / "lite.deployment.json").read_text())
    assert record == {"deployment": "lite", "task": "classification", "release": "26.06", "reference": PRESET,
                      "models": sorted(role.format("lite") for role in ROLES), "versions": [1]}
    found = named_deployments(two)
    assert sorted(found) == ["lite", "other"]
    models: TaskModels = Session(repository=two, deployment_name="other").task_models()
    assert (models.ensemble("dali"), models.taps("dali"), models.model, models.spec) == \
        ("other", "other_preprocess_dali_taps", "other_model", "other.toml")
    assert models.served(("dali",)) == ("other", "other_preprocess_dali_taps")
    session = Session(repository=two, deployment_name="lite")
    assert session.spec_path == two / "lite.toml" and session.model_path() == two / "lite_model" / "model.onnx"
    assert len(session.classes()) == 1000


def test_the_naming_rule_is_the_task_models_own():
    own = repository_models(None)
    assert [own.renamed("cats", m) for m in ("classify_dali", "classifier", "preprocess_dali_taps")] == \
        ["cats", "cats_model", "cats_preprocess_dali_taps"]


def compose_config(folder: Path) -> dict:
    env = {"TRITON_ADMIN_KEY": "test-key", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([str(COMPOSE), "-f", str(folder / "docker-compose.yml"), "config", "--format", "json"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_its_compose_file_serves_both_and_builds_each_engine(two):
    services = compose_config(two)["services"]
    loaded = [a.split("=", 1)[1] for a in services["triton"]["command"] if a.startswith("--load-model=")]
    assert sorted(loaded) == sorted(load_repository(two))
    for engine in ("lite_model", "other_model"):
        builder = services[f"engine-builder-{engine}"]
        assert builder["command"][builder["command"].index("--model") + 1] == engine
        assert services["triton"]["depends_on"][f"engine-builder-{engine}"]["condition"] == \
            "service_completed_successfully"
        assert f"/models/{engine}/1" in [v["target"] for v in services["triton"]["volumes"]]


def test_its_cpu_profile_serves_each_deployment_on_the_cpu(two, tmp_path):
    cpu = load_repository(build_cpu_profile(two, tmp_path / "cpu"))
    for name in ("lite", "other"):
        for model in (f"{name}_model", f"{name}_preprocess_dali", f"{name}_preprocess_dali_stages"):
            assert cpu[model].backend == "python" and cpu[model].parameters["spec"].string_value == f"{name}.toml"
            assert not cpu[model].default_model_filename  # the Python model is its model.py, not a model.dali


def test_its_dali_steps_ship_serialized_by_the_manifests_dali(two):
    """model.dali, what the DALI backend loads before it would autoserialize dali.py: the very pipelines deploy
    validated, serialized by DALI 2.1.1 without a GPU."""
    import nvidia.dali as dali

    from harness.preprocessing.dali_graph import production_pipelines

    assert dali.__version__ == load_manifest().dali.version
    pipelines = production_pipelines(two)
    assert sorted(pipelines) == sorted(f"{n}_preprocess_dali{s}" for n in ("lite", "other") for s in ("", "_stages"))
    for name, pipe in pipelines.items():
        assert (two / name / "1" / "model.dali").read_bytes() == pipe.serialize()
        assert load_config(two / name / "config.pbtxt").default_model_filename == "model.dali"


def test_the_same_name_again_is_refused_and_nothing_changes(two):
    before = tree(two)
    result = deploy(two, "lite", STRETCH)
    assert result.returncode == 2 and "preprocesses otherwise than lite.toml (resize.size [232], given [256]), and a new " \
        "version of lite_model cannot change what the ensemble's preprocessing step does" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and tree(two) == before


def test_a_new_version_with_other_classes_is_refused_and_nothing_changes(two, tmp_path):
    before = tree(two)
    renamed = LABELS.read_text().splitlines()
    renamed[0] = "my first class"
    (tmp_path / "classes.txt").write_text("\n".join(renamed) + "\n")
    result = harness("deploy", ONNX, "--reference", PRESET, "--out", two, "--no-check", "--name=lite", "--class-names",
                     tmp_path / "classes.txt")
    assert result.returncode == 2 and "not the classes of lite_model (lite_model/labels.txt), which its every version " \
        "answers" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and tree(two) == before


@pytest.fixture(scope="module")
def versioned(two, tmp_path_factory):
    """(a copy of `two` with `lite` deployed again: the same preprocessing, another model (its version 2), and no
    --class-names (its deployment's), the copy's files before it, what deploy printed)."""
    out = tmp_path_factory.mktemp("versioned") / "repository"
    shutil.copytree(two, out, symlinks=True)
    before = tree(out)
    result = harness("deploy", another_version(tmp_path_factory.mktemp("v2")), "--reference", PRESET, "--out", out,
                     "--no-check", "--name=lite")
    assert result.returncode == 0, result.stdout + result.stderr
    return out, before, " ".join(result.stdout.split())


REWRITTEN = {"lite_model/config.pbtxt", "lite_model/engine_input.json", "lite.deployment.json", "docker-compose.yml",
             "kubernetes.json", "README.md", ".harness-written.json"}
"""What a new version of `lite` rewrites: its model's config (which serves every version), its record, what serves
the folder."""


def test_the_same_name_and_preprocessing_again_writes_the_next_version_beside_the_first(versioned):
    out, before, _ = versioned
    after = tree(out)
    assert sorted(set(after) - set(before)) == ["lite_model/2/model.onnx"]
    assert {f for f in before if after[f] != before[f]} <= REWRITTEN  # version 1's ONNX, `other`, the specs: as they were
    assert after["lite_model/2/model.onnx"] != after["lite_model/model.onnx"]
    configs = load_repository(out)
    assert configs["lite_model"].version_policy.WhichOneof("policy_choice") == "all"  # both served
    assert configs["other_model"].version_policy.WhichOneof("policy_choice") is None  # Triton's default: the latest
    assert [s.model_version for s in configs["lite"].ensemble_scheduling.step] == [-1, -1, -1]  # the latest: 2
    assert read_engine_input(out / "lite_model").dims == (3, 224, 224)  # rewritten with the config it reads
    assert json.loads((out / "lite.deployment.json").read_text())["versions"] == [1, 2]
    assert {n: d.versions for n, d in named_deployments(out).items()} == {"lite": (1, 2), "other": (1,)}
    assert Session(repository=out, deployment_name="lite").model_path() == out / "lite_model" / "2" / "model.onnx"
    assert "`lite_model` versions 1, 2, each in its version folder (the ensemble calls the latest, 2, whose check is " \
        "beside) | not checked (deployed with --no-check) |" in (out / "README.md").read_text()


def test_a_new_versions_readme_gives_its_own_verdict_and_keeps_the_earlier_check(tmp_path):
    """The check of version 1 set aside as lite.v1.check.md: the README's verdict is the served version's (here
    not checked yet), never the version before's, whose check stays linked."""
    (tmp_path / "lite.check.md").write_text("# Consistency report: lite\n\n**No stage diverged.**\n")
    (tmp_path / "lite.check.json").write_text("{}\n")
    set_aside_proof(tmp_path, "lite", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lite.v1.check.json", "lite.v1.check.md"]
    text = readme(tmp_path, {"lite": ("lite", "lite_model", PRESET, (1, 2))}, load_manifest())
    assert "(the ensemble calls the latest, 2, whose check is beside; earlier checks: [version 1](lite.v1.check.md)) " \
        "| not checked (deployed with --no-check) |" in text


def test_the_engine_builder_plans_each_versions_engine(versioned):
    out, _, printed = versioned
    assert "the engine of version 1: trtexec --onnx=/models/lite_model/model.onnx " \
           "--saveEngine=/models/lite_model/1/model.plan.partial" in printed
    assert "the engine of version 2: trtexec --onnx=/models/lite_model/2/model.onnx " \
           "--saveEngine=/models/lite_model/2/model.plan.partial" in printed

    def plan(version: str):
        return subprocess.run([sys.executable, str(out / "build_engine.py"), "--manifest", str(out / "versions.toml"),
                               "--repository", str(out), "--model", "lite_model", "--version", version, "--dry-run"],
                              capture_output=True, text=True, timeout=60)

    assert f"--onnx={out}/lite_model/2/model.onnx" in plan("2").stdout
    for missing in ("3", "0"):
        run = plan(missing)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_compose_and_kubernetes_build_each_version_into_its_folder(versioned):
    out, _, _ = versioned
    services = compose_config(out)["services"]
    builder = services["engine-builder-lite_model-v2"]
    assert builder["command"][builder["command"].index("--version") + 1] == "2"
    mounts = {v["target"]: v["source"] for v in services["triton"]["volumes"] if v["type"] == "volume"}
    assert mounts["/models/lite_model/1"] != mounts["/models/lite_model/2"] == builder["volumes"][1]["source"]
    assert services["triton"]["depends_on"]["engine-builder-lite_model-v2"]["condition"] == "service_completed_successfully"
    objects = {(o["kind"], o["metadata"]["name"]): o for o in json.loads((out / "kubernetes.json").read_text())["items"]}
    for obj in objects.values():
        k8s_schemas.validate(obj, k8s_schemas.latest_version(), strict=True)
    job = objects[("Job", "repository-engine-build")]["spec"]["template"]["spec"]
    built = [c["command"][c["command"].index("--out") + 1] for c in (*job["initContainers"], *job["containers"])
             if "--out" in c["command"]]
    assert built == ["/repository/lite_model/1", "/repository/lite_model/2", "/repository/other_model/1"]


def test_its_cpu_profile_runs_each_versions_own_onnx(versioned, tmp_path):
    out, _, _ = versioned
    cpu = build_cpu_profile(out, tmp_path / "cpu")
    assert load_repository(cpu)["lite_model"].version_policy.WhichOneof("policy_choice") == "all"
    for version, onnx in (("1", out / "lite_model" / "model.onnx"), ("2", out / "lite_model" / "2" / "model.onnx")):
        assert "harness.serving.classifier_onnx" in (cpu / "lite_model" / version / "model.py").read_text()
    assert (cpu / "lite_model" / "2" / "model.onnx").resolve() == onnx.resolve()


def test_a_name_whose_models_would_write_over_another_is_refused(two):
    before = tree(two)
    result = deploy(two, "lite_model")  # its ensemble would be lite_model, the model of `lite`
    assert result.returncode == 2 and "holds a model lite_model already" in result.stderr, result.stderr
    assert tree(two) == before


def test_a_deployment_without_a_name_does_not_replace_the_named_ones(two):
    before = tree(two)
    result = harness("deploy", ONNX, "--reference", PRESET, "--out", two, "--no-check")
    assert result.returncode == 2 and "holds the deployments lite, other (harness deploy --name)" in result.stderr, \
        result.stderr
    assert tree(two) == before


@pytest.mark.parametrize("name", ["My Model", "../up", "-x", ""])
def test_a_name_no_model_can_have_is_refused_in_one_line(tmp_path, name):
    result = deploy(tmp_path / "out", name)
    assert result.returncode == 2 and "a deployment's name is lowercase letters" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_an_unknown_deployment_is_named_with_those_the_folder_holds(two):
    with pytest.raises(Exception, match="holds no deployment of that name .it holds: lite, other"):
        Session(repository=two, deployment_name="cats").task_models()
    assert os.path.isdir(two)


def test_its_readme_names_each_deployment_the_versions_and_the_commands_that_check_it_again(two):
    text = (two / "README.md").read_text()
    assert "Written for Triton 26.06 (server 2.70.0; its DALI 2.1.1, TensorRT 11.0.0, CUDA 13.3.0)" in text
    for name in ("lite", "other"):
        assert f"| {name} | `{name}` | `{name}_model` | not checked (deployed with --no-check) |" in text
        assert f"harness check PHOTOS --repository . --deployment {name} --url HOST:8001 --reference '{PRESET}'" in text
    assert "harness preflight --url HOST:8001 --repository ." in text and "docker compose up -d" in text


def test_moved_elsewhere_its_compose_file_names_nothing_outside_the_folder(two, tmp_path):
    moved = tmp_path / "shipped"
    shutil.copytree(two, moved, symlinks=True)
    services = compose_config(moved)["services"]
    paths = [Path(v["source"]) for s in services.values() for v in s.get("volumes", []) if v["type"] == "bind"]
    paths += [Path(s["build"]["context"]) for s in services.values() if "build" in s]
    assert paths and all(p == moved.resolve() for p in paths), paths
    assert str(PROJECT_ROOT) not in (moved / "docker-compose.yml").read_text()
    # its engine builder runs from the folder, against the manifest beside it (the dry run prints the trtexec command)
    run = subprocess.run([sys.executable, str(moved / "build_engine.py"), "--manifest", str(moved / "versions.toml"),
                          "--repository", str(moved), "--model", "other_model", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and f"--onnx={moved}/other_model/model.onnx" in run.stdout, run.stdout + run.stderr


def test_its_images_are_built_from_the_folder_with_the_projects_pins():
    """The serving image is docker/triton.Dockerfile with the harness from the folder's wheel; the builder is the
    release's TensorRT image with the folder's build_engine.py and manifest."""
    project, folder = SERVING_DOCKERFILE.read_text(), serving_dockerfile(SERVING_DOCKERFILE.read_text())
    manifest = load_manifest()
    assert f"FROM {manifest.server.image}\n" in folder and "COPY *.whl /tmp/wheels/\n" in folder
    assert "/src/harness-project" not in folder and "COPY harness " not in folder
    pins = [line for line in project.splitlines() if "==" in line or line.startswith(("ARG ", "ENV ", "USER "))]
    assert pins and all(line in folder.splitlines() for line in pins)
    builder = engine_dockerfile(manifest)
    assert f"FROM {manifest.tensorrt.image}\n" in builder and "COPY build_engine.py versions.toml /opt/engine/" in builder


@pytest.mark.parametrize("version", ["1.32", k8s_schemas.latest_version()])
def test_its_kubernetes_manifest_is_valid_and_serves_the_folder_as_its_compose_file_does(two, version):
    """kubernetes.json (one List) against the API's schemas (strict), the Kubernetes version of docs/kubernetes.md and
    the newest: the Job fills the volume from the serving image and builds each engine with the folder's builder,
    Triton runs compose's command, and no object names a path or an image of the checkout."""
    text = (two / "kubernetes.json").read_text()
    objects = {(o["kind"], o["metadata"]["name"]): o for o in json.loads(text)["items"]}
    for obj in objects.values():
        k8s_schemas.validate(obj, version, strict=True)
    # named after the folder (`repository`) once it holds several deployments, as its compose project is
    job, deployment = objects[("Job", "repository-engine-build")]["spec"]["template"]["spec"], \
        objects[("Deployment", "repository-triton")]["spec"]["template"]["spec"]
    assert compose_config(two)["name"] == "repository"
    built = [c["command"][c["command"].index("--model") + 1] for c in (*job["initContainers"], *job["containers"])
             if "--model" in c["command"]]
    assert built == ["lite_model", "other_model"] and job["initContainers"][0]["command"][-1] == \
        "cp -R /opt/deployment/. /repository/"
    images = {c["image"] for spec in (job, deployment) for c in (*spec["initContainers"], *spec["containers"])}
    assert images == {"harness-triton:26.06", "harness-engine-builder:26.06"}
    assert "/opt/project" not in text and "hostPath" not in text
    compose = compose_config(two)["services"]["triton"]["command"]
    [triton] = deployment["containers"]
    same = [a for a in triton["command"] if "restricted" not in a]
    assert same == [a for a in compose if "restricted" not in a] and "--load-model=other_preprocess_dali" in same
    assert deployment["securityContext"]["runAsNonRoot"] and triton["securityContext"]["readOnlyRootFilesystem"]


@pytest.mark.parametrize("versions", [["2"], [0, 1], [], [1.5], "12"])
def test_a_record_whose_versions_are_not_tritons_is_refused_in_one_line(tmp_path, versions):
    record = {"deployment": "lite", "task": "classification", "release": "26.06", "models": ["lite"],
              "versions": versions}
    (tmp_path / "lite.deployment.json").write_text(json.dumps(record))
    with pytest.raises(Exception, match=r"lite.deployment.json: not a deployment record harness deploy wrote \(versions"):
        named_deployments(tmp_path)
    del record["versions"]  # a record written before versions: its model's one version
    (tmp_path / "lite.deployment.json").write_text(json.dumps(record))
    assert named_deployments(tmp_path)["lite"].versions == (1,)
