"""deploy/kubernetes/, rendered by the real Kustomize (kubectl's) and every object checked
against the Kubernetes API schemas of the version docs/kubernetes.md names (kubernetes-validate,
strict: unknown fields are errors), then against the repository: the images follow
deploy/versions.toml, Triton runs compose's command, the pieces refer to each other
correctly, and the metric names the autoscaler and the dashboard use are the ones the
embedded Triton exports. No cluster here: nothing is applied."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from kubernetes_validate import utils as k8s_schemas

from harness.manifest import load_manifest
from harness.repository import load_config, production_models, stage_taps
from harness.task import shipped_engines, shipped_models

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.32"
"""The Kubernetes version the manifests target (docs/kubernetes.md names it: the kubectl and
Kustomize here); they are also checked against the newest schemas the package ships."""
KUSTOMIZATIONS = ("base", "check", "merge", "overlays/production", "overlays/check-host")
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
"""Kinds of a CRD (the Prometheus Operator's), which have no schema in kubernetes-validate:
checked below for what they refer to."""
MANIFEST = load_manifest()
KUBECTL = shutil.which("kubectl")


def kustomize(directory: Path) -> list[dict]:
    assert KUBECTL, "kubectl (its built-in Kustomize renders deploy/kubernetes) is not on PATH"
    run = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc]


def schema_errors(objects: list[dict], version: str) -> list[str]:
    errors = []
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            k8s_schemas.validate(obj, version, strict=True)
        except k8s_schemas.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
        except k8s_schemas.SchemaNotFoundError:
            errors.append(f"{obj['kind']} ({obj['apiVersion']}) has no schema in Kubernetes {version}")
    return errors


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: kustomize(KUBERNETES / name) for name in KUSTOMIZATIONS}


@pytest.fixture(scope="module")
def production(rendered) -> dict[tuple[str, str], dict]:
    """The production overlay plus the check and merge Jobs, by (kind, name)."""
    objects = [*rendered["overlays/production"], *rendered["check"], *rendered["merge"]]
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def template(obj: dict) -> dict | None:
    """The pod template of a Deployment, Job or CronJob (None for other kinds)."""
    spec = obj.get("spec", {})
    return spec["jobTemplate"]["spec"]["template"] if "jobTemplate" in spec else spec.get("template")


def pod(obj: dict) -> dict:
    return template(obj)["spec"]


def container(obj: dict, name: str) -> dict:
    spec = pod(obj)
    [found] = [c for c in (*spec.get("initContainers", ()), *spec["containers"]) if c["name"] == name]
    return found


def images(objects) -> set[str]:
    return {c["image"] for o in objects if template(o)
            for c in (*pod(o).get("initContainers", ()), *pod(o)["containers"])}


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, k8s_schemas.latest_version()])
def test_every_object_is_valid_for_the_kubernetes_api(rendered, version):
    for name, objects in rendered.items():
        assert objects, name
        assert schema_errors(objects, version) == [], name


def test_the_validation_rejects_a_broken_manifest(rendered, tmp_path):
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    triton = tmp_path / "kubernetes" / "base" / "triton.yaml"
    triton.write_text(triton.read_text().replace("          ports:\n", "          gpus_please: true\n          ports:\n", 1))
    errors = schema_errors(kustomize(tmp_path / "kubernetes" / "base"), KUBERNETES_VERSION)
    assert len(errors) == 1 and "gpus_please" in errors[0]
    # and a kind the version does not have (batch/v2) is refused, not skipped
    job = {**rendered["merge"][0], "apiVersion": "batch/v2"}
    assert "no schema" in schema_errors([job], KUBERNETES_VERSION)[0]


def test_the_docs_name_the_validated_version():
    assert f"Kubernetes {KUBERNETES_VERSION}" in (ROOT / "docs" / "kubernetes.md").read_text()


def expected_images(registry: str = "") -> set[str]:
    return {f"{registry}harness-triton:{MANIFEST.release}", f"{registry}harness:{MANIFEST.release}",
            MANIFEST.tensorrt.image}


def test_images_are_the_manifests_release(rendered):
    for name in ("base", "check", "merge"):
        assert images(rendered[name]) <= expected_images(), name
    assert images(rendered["overlays/production"]) == expected_images("registry.example.com/")
    assert images(rendered["base"]) == expected_images()  # the base alone names all three
    # the harness image: the virtualenv's Python (the embedded stub's), the project's lock
    dockerfile = (ROOT / "docker" / "harness.Dockerfile").read_text()
    base = re.search(r"^FROM\s+python:(\d+\.\d+)\.\d+-slim", dockerfile, re.M)
    assert base and base.group(1) == MANIFEST.embedded_python
    assert "pip install --no-cache-dir -r requirements.lock" in dockerfile


def test_a_drifted_image_tag_is_caught(tmp_path):
    shutil.copytree(KUBERNETES, tmp_path / "kubernetes")
    job = tmp_path / "kubernetes" / "base" / "engine-build-job.yaml"
    job.write_text(job.read_text().replace(MANIFEST.tensorrt.image, "nvcr.io/nvidia/tensorrt:26.05-py3"))
    assert not images(kustomize(tmp_path / "kubernetes" / "base")) <= expected_images()


def compose_triton() -> dict:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return compose["services"]


def same_key(command: list[str]) -> list[str]:
    """``command`` with its admin key's source written one way: compose's
    ``${TRITON_ADMIN_KEY:?...}`` (the host's environment) and Kubernetes' ``$(TRITON_ADMIN_KEY)``
    (the container's, from the Secret) are the same key."""
    return [re.sub(r"\$\{TRITON_ADMIN_KEY:\?[^}]*\}|\$\(TRITON_ADMIN_KEY\)", "<key>", arg) for arg in command]


def test_triton_runs_composes_command_on_a_gpu_with_health_probes(production):
    triton = production["Deployment", "triton"]
    server = container(triton, "triton")
    assert same_key(server["command"]) == same_key(compose_triton()["triton"]["command"])
    assert sum("<key>" in arg for arg in same_key(server["command"])) == 2
    resources = server["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
    assert pod(triton)["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod(triton)["tolerations"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert server["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    # every port of the Service reaches a named port of the pods it selects
    service = production["Service", "triton"]
    assert service["spec"]["selector"].items() <= triton["spec"]["template"]["metadata"]["labels"].items()
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {name: name for name in ports}
    # draining: leave the endpoints (preStop), then Triton's exit timeout (30 s by default) for requests in flight
    pre_stop = int(server["lifecycle"]["preStop"]["exec"]["command"][1])
    exit_timeout = next((int(a.split("=")[1]) for a in server["command"] if a.startswith("--exit-timeout-secs=")), 30)
    assert pod(triton)["terminationGracePeriodSeconds"] >= pre_stop + exit_timeout
    assert server["resources"]["requests"]["cpu"] and server["resources"]["requests"]["memory"]
    assert "replicas" not in triton["spec"]  # the autoscaler's to set, not every `kubectl apply`'s


def loaded_models(command: list[str]) -> list[str]:
    return [arg.split("=", 1)[1] for arg in command if arg.startswith("--load-model=")]


def test_production_loads_no_stage_taps_and_a_check_host_those_of_every_task(production, rendered):
    """Issue 58: the base (and the production overlay) load every task's ensembles and what they
    run or call, no stage taps; overlays/check-host (components/check-host) adds the taps of every
    task, as docker-compose.check.yml does, and changes nothing else."""
    repository = ROOT / "model_repository"
    served = container(production["Deployment", "triton"], "triton")["command"]
    assert sorted(loaded_models(served)) == sorted(production_models(repository))
    assert not set(loaded_models(served)) & set(stage_taps(repository))
    check_host = {(o["kind"], o["metadata"]["name"]): o for o in rendered["overlays/check-host"]}
    checked = container(check_host["Deployment", "triton"], "triton")["command"]
    assert sorted(loaded_models(checked)) == sorted(shipped_models())
    compose_check = yaml.safe_load((ROOT / "docker-compose.check.yml").read_text())["services"]["triton"]["command"]
    assert sorted(same_key(checked)) == sorted(same_key(compose_check))  # flags in any order: Triton's meaning
    # nothing else differs from the production overlay
    production_overlay = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in rendered["overlays/production"]}
    container(production_overlay["Deployment", "triton"], "triton")["command"] = checked
    assert check_host == production_overlay


def test_the_engine_is_built_where_triton_waits_for_it_on_the_same_gpus(production):
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("build_engine", ROOT / "docker" / "build_engine.py")
    build_engine = module_from_spec(spec)
    spec.loader.exec_module(build_engine)
    job, triton = production["Job", "engine-build"], production["Deployment", "triton"]
    builder = container(job, "build")
    assert builder["image"] == MANIFEST.tensorrt.image
    assert builder["resources"]["limits"]["nvidia.com/gpu"] == 1
    out = Path(builder["command"][builder["command"].index("--out") + 1])
    repository = Path(builder["command"][builder["command"].index("--repository") + 1])
    assert out == repository / "classifier" / "1"
    [builder_volume] = [m["name"] for m in builder["volumeMounts"] if Path(m["mountPath"]) == repository]
    wait = container(triton, "wait-for-engine")
    [served] = [m for m in wait["volumeMounts"] if m["name"] == "model-repository"]
    assert f"{served['mountPath']}/classifier/1/{build_engine.STAMP}" in wait["command"][-1]
    claim = lambda obj, name: next(v["persistentVolumeClaim"]["claimName"] for v in pod(obj)["volumes"]  # noqa: E731
                                   if v["name"] == name)
    assert claim(job, builder_volume) == claim(triton, "model-repository")
    assert ("PersistentVolumeClaim", claim(triton, "model-repository")) in production
    assert container(triton, "triton")["volumeMounts"][0] == {**served, "readOnly": True}
    # an engine only runs on the GPU model that built it
    assert pod(job)["nodeSelector"] == pod(triton)["nodeSelector"]
    assert "nvidia.com/gpu.product" in pod(triton)["nodeSelector"]
    assert pod(job)["tolerations"] == pod(triton)["tolerations"]
    # compose's settings and their defaults (`${FP16:-0}`)
    defaults = {k: re.fullmatch(r"\$\{\w+:-(.*)\}", v).group(1)
                for k, v in compose_triton()["engine-builder"]["environment"].items()}
    assert {e["name"]: e["value"] for e in builder["env"]} == defaults


def test_the_detectors_engine_is_built_before_the_classifiers_and_triton_waits_for_both(production):
    job, triton = production["Job", "engine-build"], production["Deployment", "triton"]
    build, detector = container(job, "build"), container(job, "build-detector")
    # the repository copied first, then every other task's engine (TaskModels.engines) before the classifier's
    copy_first, *builds = [c["name"] for c in pod(job)["initContainers"]]
    assert copy_first == "copy-repository"
    assert sorted(builds) == sorted(f"build-{engine}" for engine in shipped_engines() if engine != "classifier")
    assert detector["image"] == build["image"] == MANIFEST.tensorrt.image
    assert detector["command"][:2] == build["command"][:2]  # the same script
    assert detector["command"][detector["command"].index("--model") + 1] == "detector"
    repository = Path(detector["command"][detector["command"].index("--repository") + 1])
    assert Path(detector["command"][detector["command"].index("--out") + 1]) == repository / "detector" / "1"
    assert detector["resources"]["limits"]["nvidia.com/gpu"] == 1  # one GPU: init containers run one at a time
    defaults = {k: re.fullmatch(r"\$\{\w+:-(.*)\}", v).group(1)
                for k, v in compose_triton()["detector-engine-builder"]["environment"].items()}
    assert {e["name"]: e["value"] for e in detector["env"]} == defaults
    # the build reads detection.toml with harness/spec.py (and harness/files.py), each model's input with
    # harness/engine_input.py, copied beside the script
    copy = container(job, "copy-repository")["command"][-1]
    assert all(f"/opt/project/harness/{name}" in copy for name in ("spec.py", "files.py", "engine_input.py"))
    wait = container(triton, "wait-for-engine")["command"][-1]
    assert "/models/detector/1/model.plan.stamp.json" in wait and "/models/classifier/1/model.plan.stamp.json" in wait


def test_the_recognizers_engine_is_built_as_compose_builds_it_and_triton_waits_for_it(production):
    """The OCR pipeline's recognizer (docs/ocr.md): an init container after the detector's, with
    compose's settings; triton waits for its stamp and loads the OCR models."""
    job, triton = production["Job", "engine-build"], production["Deployment", "triton"]
    build, recognizer = container(job, "build"), container(job, "build-recognizer")
    assert recognizer["image"] == build["image"] and recognizer["command"][:2] == build["command"][:2]
    assert recognizer["command"][recognizer["command"].index("--model") + 1] == "recognizer"
    repository = Path(recognizer["command"][recognizer["command"].index("--repository") + 1])
    assert Path(recognizer["command"][recognizer["command"].index("--out") + 1]) == repository / "recognizer" / "1"
    defaults = {k: re.fullmatch(r"\$\{\w+:-(.*)\}", v).group(1)
                for k, v in compose_triton()["recognizer-engine-builder"]["environment"].items()}
    assert {e["name"]: e["value"] for e in recognizer["env"]} == defaults
    assert "/models/recognizer/1/model.plan.stamp.json" in container(triton, "wait-for-engine")["command"][-1]
    assert {f"--load-model={m}" for m in ("recognizer", "ocr_preprocess_dali", "ocr_dali", "ocr_opencv")} <= set(
        container(triton, "triton")["command"])


def test_the_segmenters_engine_is_built_as_compose_builds_it_and_triton_waits_for_it(production):
    job, triton = production["Job", "engine-build"], production["Deployment", "triton"]
    build, segmenter = container(job, "build"), container(job, "build-segmenter")
    assert segmenter["image"] == build["image"] == MANIFEST.tensorrt.image
    assert segmenter["command"][segmenter["command"].index("--model") + 1] == "segmenter"
    repository = Path(segmenter["command"][segmenter["command"].index("--repository") + 1])
    assert Path(segmenter["command"][segmenter["command"].index("--out") + 1]) == repository / "segmenter" / "1"
    defaults = {k: re.fullmatch(r"\$\{\w+:-(.*)\}", v).group(1)
                for k, v in compose_triton()["segmenter-engine-builder"]["environment"].items()}
    assert {e["name"]: e["value"] for e in segmenter["env"]} == defaults
    assert "/models/segmenter/1/model.plan.stamp.json" in container(triton, "wait-for-engine")["command"][-1]


def test_every_tasks_engine_is_built_and_waited_for(production):
    """Each engine of each registered task (``TaskModels.engines``, not a list here): a container
    of the engine-build Job builds it (``--model``, the script's default being the classifier)
    into its model's version folder; Triton waits for its stamp and loads it."""
    job, triton = production["Job", "engine-build"], production["Deployment", "triton"]
    spec = pod(job)
    builders = {}
    for c in (*spec.get("initContainers", ()), *spec["containers"]):
        command = [str(a) for a in c.get("command") or ()]
        if any("build_engine.py" in a for a in command):
            builders[command[command.index("--model") + 1] if "--model" in command else "classifier"] = command
    wait, serve = container(triton, "wait-for-engine")["command"][-1], container(triton, "triton")["command"]
    for engine in shipped_engines():
        assert engine in builders, f"no container of the engine-build Job builds {engine}'s engine"
        command = builders[engine]
        repository = Path(command[command.index("--repository") + 1])
        assert Path(command[command.index("--out") + 1]) == repository / engine / "1", engine
        assert f"/models/{engine}/1/model.plan.stamp.json" in wait, engine
        assert f"--load-model={engine}" in serve, engine


def copied_paths(command: str) -> list[str]:
    """The /opt/project/... paths a `cp` in an init container reads from the harness image."""
    return re.findall(r"/opt/project/(\S+?)(?:/\.)?(?=\s|$)", command)


def test_what_the_init_containers_copy_is_in_the_harness_image(production):
    dockerfile = (ROOT / "docker" / "harness.Dockerfile").read_text()
    assert re.search(r"^WORKDIR /opt/project$", dockerfile, re.M)
    copied = {line.split()[-1] for line in dockerfile.splitlines() if line.startswith("COPY ")}
    for kind, name, init in (("Job", "engine-build", "copy-repository"), ("Job", "preflight", "copy-known-answers")):
        paths = copied_paths(container(production[kind, name], init)["command"][-1])
        assert paths, init
        for path in paths:
            assert any(path == c or path.startswith(c.rstrip("/") + "/") for c in copied), path
            assert (ROOT / path).exists(), path


def test_preflight_runs_composes_command_in_the_server_image(production):
    preflight = container(production["Job", "preflight"], "preflight")
    assert preflight["command"] == compose_triton()["preflight"]["entrypoint"]
    assert preflight["image"].endswith(f"harness-triton:{MANIFEST.release}")
    mounts = {m["mountPath"] for m in preflight["volumeMounts"]}
    for option in ("--repository", "--known-answers"):
        assert preflight["command"][preflight["command"].index(option) + 1] in mounts


def test_locust_master_and_workers_run_the_locustfile_against_the_service(production):
    master = container(production["Deployment", "locust-master"], "locust")
    worker = container(production["Deployment", "locust-worker"], "locust")
    for c in (master, worker):
        locustfile = Path(c["command"][c["command"].index("-f") + 1])
        assert locustfile == Path("/opt/project") / "loadtest" / "locustfile.py"
        assert (ROOT / locustfile.relative_to("/opt/project")).is_file()
    assert master["command"][master["command"].index("--host") + 1] == "triton:8001"
    assert "--master" in master["command"] and "--worker" in worker["command"]
    master_service = production["Service", "locust-master"]
    assert worker["command"][worker["command"].index("--master-host") + 1] == master_service["metadata"]["name"]
    assert {p["port"] for p in master_service["spec"]["ports"]} == {5557, 8089}
    assert production["Deployment", "locust-worker"]["spec"]["replicas"] >= 1


def test_the_sharded_check_is_an_indexed_job_and_merge_reads_its_run(production):
    job = production["Job", "harness-check"]
    spec, check = job["spec"], container(job, "check")
    env = {e["name"]: e for e in check["env"]}
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["SHARDS"]["value"])
    assert env["SHARD"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    script = check["command"][-1]
    assert '--shard "$SHARD/$SHARDS"' in script and "--url triton:8001" in script
    merge = container(production["Job", "harness-merge"], "merge")
    run = env["RUN"]["valueFrom"]["configMapKeyRef"]
    assert {e["name"]: e for e in merge["env"]}["RUN"]["valueFrom"]["configMapKeyRef"] == run
    assert ("ConfigMap", run["name"]) in production
    assert "harness merge /reports/$RUN/shard-*" in merge["command"][-1]
    assert re.search(r"out=/reports/\$RUN/shard-\$SHARD\b", script)
    # both Jobs mount the one reports volume at /reports
    claims = [{v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod(production["Job", n])["volumes"]
               if "persistentVolumeClaim" in v}
              for n in ("harness-check", "harness-merge")]
    assert claims[0]["reports"] == claims[1]["reports"]


ADAPTER_RULES = KUBERNETES / "components" / "monitoring" / "prometheus-adapter-rules.yaml"
DASHBOARD = KUBERNETES / "components" / "monitoring" / "triton-dashboard.json"


def adapter_rule() -> dict:
    [rule] = yaml.safe_load(ADAPTER_RULES.read_text())["rules"]
    return rule


def test_the_autoscaler_scales_triton_on_the_adapters_queue_metric(production):
    hpa = production["HorizontalPodAutoscaler", "triton"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == adapter_rule()["name"]["as"]
    # the rules the adapter is given are the ones in the rendered ConfigMap
    rules = production["ConfigMap", "prometheus-adapter-triton-rules"]["data"]["config.yaml"]
    assert yaml.safe_load(rules) == yaml.safe_load(ADAPTER_RULES.read_text())
    # The target is far above what the dynamic batchers queue on purpose along classify_dali:
    # only waiting for busy instances scales.
    deliberate = 0
    for model in ("validate_image", "preprocess_dali", "classifier"):
        config = load_config(ROOT / "model_repository" / model / "config.pbtxt")
        deliberate += config.dynamic_batching.max_queue_delay_microseconds if config.HasField("dynamic_batching") else 0
    assert int(metric["pods"]["target"]["averageValue"]) >= 5 * deliberate > 0


def test_the_service_monitor_scrapes_the_metrics_port(production):
    monitor, service = production["ServiceMonitor", "triton"], production["Service", "triton"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    assert set(monitor["spec"]) == {"selector", "endpoints"} and set(endpoint) == {"port", "path", "interval"}


def test_the_dashboard_plots_the_autoscalers_query():
    rule = adapter_rule()
    query = rule["metricsQuery"].replace("<<.GroupBy>>", "pod").replace("{<<.LabelMatchers>>}", "")
    query = query.replace("<<.LabelMatchers>>,", "")
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    assert query in exprs


GPU_ONLY_METRICS = {"nv_gpu_utilization", "nv_gpu_memory_used_bytes"}
"""Triton exports these only on a GPU (the server docs' GPU metrics): not checkable here."""


def metric_names(text: str) -> set[str]:
    return set(re.findall(r"\bnv_[a-z_]+\b", text))


def test_the_metrics_used_are_what_triton_exports(server):
    import tritonclient.http as http

    with http.InferenceServerClient(server.http_url) as client:
        for name in ("squirrel_cls.jpg", "baboon.jpg"):
            data = np.frombuffer((ROOT / "data" / "photos" / name).read_bytes(), np.uint8)[None]
            image = http.InferInput("IMAGE", list(data.shape), "UINT8")
            image.set_data_from_numpy(data)
            client.infer("classify_dali", [image])
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        exported = response.read().decode()
    names = {line.split("{")[0].split()[0] for line in exported.splitlines() if line and not line.startswith("#")}
    used = metric_names(ADAPTER_RULES.read_text()) | metric_names(DASHBOARD.read_text())
    assert used - GPU_ONLY_METRICS <= names, used - GPU_ONLY_METRICS - names
    assert not GPU_ONLY_METRICS & names  # so the list names only what a CPU cannot show
    assert used & GPU_ONLY_METRICS == GPU_ONLY_METRICS
    # the label values the queries select on: the model label, with the production ensembles
    models = set(re.findall(r'nv_inference_request_success\{model="([^"]+)"', exported))
    for text in (ADAPTER_RULES.read_text(), DASHBOARD.read_text()):
        for selected in re.findall(r'model=~\\?"([^"\\]+)', text):
            assert set(selected.split("|")) <= models or selected.endswith(".*"), selected
    success = {m: float(v) for m, v in re.findall(r'nv_inference_request_success\{model="([^"]+)".*\} (\S+)', exported)}
    assert success["classify_dali"] >= 2


def test_every_pod_is_restricted_not_root_no_escalation_read_only_with_limits(production):
    """Issue 35: every pod runs as a non-root uid under the runtime's default seccomp profile;
    every container drops all capabilities, cannot escalate, has a read-only root filesystem
    (/tmp an emptyDir) and a memory limit."""
    pods = {key: o for key, o in production.items() if template(o)}
    assert {("Deployment", "triton"), ("Deployment", "locust-master"), ("Job", "harness-check"),
            ("CronJob", "harness-watch")} <= set(pods)
    for key, obj in pods.items():
        spec = pod(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0, key
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, key
        for c in (*spec.get("initContainers", ()), *spec["containers"]):
            context = c["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True, (key, c)
            assert context["capabilities"]["drop"] == ["ALL"], (key, c["name"])
            assert c["resources"].get("limits", {}).get("memory"), (key, c["name"])
            tmp = [m for m in c.get("volumeMounts", ()) if m["mountPath"] == "/tmp"]
            assert tmp or c["name"] in ("wait-for-engine", "wait-for-triton"), (key, c["name"])


def test_the_admin_key_comes_from_a_secret_and_only_the_clients_reach_triton(production):
    triton = production["Deployment", "triton"]
    [key] = [e for e in container(triton, "triton")["env"] if e["name"] == "TRITON_ADMIN_KEY"]
    assert set(key) == {"name", "valueFrom"} and key["valueFrom"]["secretKeyRef"]["name"] == "triton-admin-key"
    assert not any(o["kind"] == "Secret" for o in production.values())  # the operator creates it: no key in the files
    policy = production["NetworkPolicy", "triton"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels(triton).items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    clients, scrape = policy["spec"]["ingress"]
    [client_label] = clients["from"][0]["podSelector"]["matchLabels"].items()
    assert {p["port"] for p in scrape["ports"]} == {"metrics"}
    assert scrape["from"][0]["namespaceSelector"] and scrape["from"][0]["podSelector"]
    # Every pod that talks to Triton carries the label; the others do not.
    talks = {key for key, o in production.items() if template(o)
             and "triton:80" in json.dumps(pod(o))} | {("Deployment", "locust-worker")}  # the users, via the master
    labelled = {key for key, o in production.items() if template(o)
                and pod_labels(o).get(client_label[0]) == client_label[1]}
    assert talks - {("Deployment", "locust-master")} == labelled  # the master runs no users itself
    locust = production["NetworkPolicy", "locust-master"]
    [rule] = locust["spec"]["ingress"]
    assert rule["ports"] == [{"port": "workers"}]  # the web UI (no login) is reached by port-forward only


def pod_labels(obj: dict) -> dict:
    return template(obj)["metadata"]["labels"]


def test_the_watch_runs_once_a_round_against_the_service_and_keeps_its_record(production):
    cron = production["CronJob", "harness-watch"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    watch = container(cron, "watch")
    command = watch["command"]
    assert command[:3] == ["harness", "watch", "--once"] and command[command.index("--url") + 1] == "triton:8001"
    assert command[command.index("--push-gateway") + 1].startswith("http://")
    record = Path(command[command.index("--known-answers") + 1])
    [mount] = [m for m in watch["volumeMounts"] if record.is_relative_to(m["mountPath"])]
    [volume] = [v for v in pod(cron)["volumes"] if v["name"] == mount["name"]]
    assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in production  # kept between runs
    assert pod(cron)["securityContext"]["fsGroup"] == pod(cron)["securityContext"]["runAsUser"]  # and writable


def test_the_alerts_use_the_metrics_the_watch_exports(production, tmp_path):
    """Each rule is an alert with a severity and a summary, and every watch metric its
    expression names is one a real watch's registry exports."""
    from prometheus_client import CollectorRegistry

    from loadtest.watch import Record, Watch

    registry = CollectorRegistry()
    Watch("grpc", "127.0.0.1:1", ["m"], {}, Record(tmp_path / "none.npz"), 1.0, registry)
    exported = {s.name for family in registry.collect() for s in family.samples} | \
        {family.name for family in registry.collect()}
    [group] = production["PrometheusRule", "harness-watch"]["spec"]["groups"]
    alerts = {rule["alert"]: rule for rule in group["rules"]}
    assert set(alerts) == {"HarnessWatchWrongAnswers", "HarnessWatchStale", "HarnessWatchAbsent"}
    for rule in alerts.values():
        assert rule["labels"]["severity"] in ("critical", "warning") and rule["annotations"]["summary"]
        names = set(re.findall(r"harness_watch_\w+", rule["expr"]))
        assert names and names <= exported, (rule["alert"], names - exported)
