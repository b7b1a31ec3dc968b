"""The deployment's Kubernetes manifest, ``kubernetes.json`` (one ``List``: ``kubectl apply -f``), locked
down as the project's base (``deploy/kubernetes/base``: the same security contexts, probes, draining,
admin key and network policy) and naming nothing outside the folder: the repository volume is filled
by the engine-build Job from the serving image (built from the folder, :mod:`harness.deploy.standalone`,
with the folder in it at :data:`IN_IMAGE`), which then builds each engine with the folder's builder
image. A file, not a kustomize folder: Triton takes every folder of a repository for a model."""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from harness.deploy.standalone import BUILDER_FILE, ENGINE_DIR, IN_IMAGE, MANIFEST_FILE

KUBERNETES_FILE = "kubernetes.json"

_RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                   "seccompProfile": {"type": "RuntimeDefault"}}
_RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
_GPU_NODES = {"nodeSelector": {"nvidia.com/gpu.present": "true"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
_RESTRICTED_APIS = "model-repository,logging,trace,shared-memory:admin-key=$(TRITON_ADMIN_KEY)"


def kubernetes_manifest(name: str, models: list[str], engines: list[str], release: str,
                        versions: Mapping[str, Sequence[int]] | None = None) -> str:
    """The manifest of a folder serving ``models`` (``engines`` of them built first, one at least, each of its
    ``versions`` into its version folder: version 1 alone by default), its objects named ``name-*`` (``_`` becomes
    ``-``: Kubernetes names are DNS labels)."""
    assert engines, "a deployment's model is an engine"
    name = name.replace("_", "-")
    serving, builder = f"harness-triton:{release}", f"harness-engine-builder:{release}"
    labels = {"app.kubernetes.io/part-of": "harness", "app.kubernetes.io/instance": name}
    volume = f"{name}-models"
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "model-repository", "mountPath": "/repository"}]

    built = [(e, v) for e in engines for v in (versions or {}).get(e, (1,))]

    def build(engine: str, version: int) -> dict:
        which = [] if version == 1 else ["--version", str(version)]
        suffix = "" if version == 1 else f"-v{version}"
        return {"name": f"build-{engine.replace('_', '-')}"[:63 - len(suffix)] + suffix, "image": builder,
                "command": ["python3", f"{ENGINE_DIR}/{BUILDER_FILE}", "--manifest", f"{ENGINE_DIR}/{MANIFEST_FILE}",
                            "--repository", "/repository", "--model", engine, *which,
                            "--out", f"/repository/{engine}/{version}"],
                "env": [{"name": "FP16", "value": "0"}, {"name": "OPT_BATCH", "value": "8"}],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1},
                              "limits": {"memory": "16Gi", "nvidia.com/gpu": 1}},
                "securityContext": _RESTRICTED, "volumeMounts": mounts}

    copy = {"name": "copy-repository", "image": serving,
            "command": ["sh", "-c", f"cp -R {IN_IMAGE}/. /repository/"],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "securityContext": _RESTRICTED, "volumeMounts": mounts}
    builds = [build(e, v) for e, v in built]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-engine-build", "labels": labels},
           "spec": {"backoffLimit": 2, "ttlSecondsAfterFinished": 86400, "template": {
               "metadata": {"labels": {**labels, "app.kubernetes.io/name": f"{name}-engine-build"}},
               "spec": {"securityContext": _RESTRICTED_POD, "restartPolicy": "Never", **_GPU_NODES,
                        "initContainers": [copy, *builds[:-1]], "containers": builds[-1:],
                        "volumes": [{"name": "tmp", "emptyDir": {}},
                                    {"name": "model-repository", "persistentVolumeClaim": {"claimName": volume}}]}}}}
    stamps = " && ".join(f"[ -f /models/{e}/{v}/model.plan.stamp.json ]" for e, v in built)
    selector = {"app.kubernetes.io/name": f"{name}-triton"}
    triton = {"name": "triton", "image": serving,
              "command": ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit",
                          *(f"--load-model={m}" for m in models), "--strict-readiness=true", "--exit-on-error=true",
                          "--backend-config=python,shm-default-byte-size=33554432",
                          f"--http-restricted-api={_RESTRICTED_APIS}", f"--grpc-restricted-protocol={_RESTRICTED_APIS}"],
              "env": [{"name": "TRITON_ADMIN_KEY", "valueFrom": {"secretKeyRef": {"name": "triton-admin-key", "key": "key"}}},
                      {"name": "HOME", "value": "/tmp"}],
              "ports": [{"name": "http", "containerPort": 8000}, {"name": "grpc", "containerPort": 8001},
                        {"name": "metrics", "containerPort": 8002}],
              "startupProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 10,
                               "failureThreshold": 30},
              "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5,
                                 "failureThreshold": 2},
              "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 10,
                                "timeoutSeconds": 5, "failureThreshold": 3},
              "lifecycle": {"preStop": {"exec": {"command": ["sleep", "15"]}}},
              "resources": {"requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1},
                            "limits": {"memory": "16Gi", "nvidia.com/gpu": 1}},
              "securityContext": _RESTRICTED,
              "volumeMounts": [{"name": "model-repository", "mountPath": "/models", "readOnly": True},
                               {"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]}
    wait = {"name": "wait-for-engine", "image": serving,
            "command": ["sh", "-c", f"until {stamps}; do echo waiting for the engine-build Job; sleep 10; done"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
            "securityContext": _RESTRICTED,
            "volumeMounts": [{"name": "model-repository", "mountPath": "/models", "readOnly": True}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"{name}-triton", "labels": labels},
                  "spec": {"selector": {"matchLabels": selector},
                           "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                           "template": {"metadata": {"labels": {**labels, **selector}}, "spec": {
                               **_GPU_NODES, "terminationGracePeriodSeconds": 60, "securityContext": _RESTRICTED_POD,
                               "initContainers": [wait], "containers": [triton],
                               "volumes": [{"name": "model-repository", "persistentVolumeClaim": {"claimName": volume,
                                                                                                  "readOnly": True}},
                                           {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                                           {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-triton", "labels": labels},
               "spec": {"selector": selector, "ports": [{"name": "http", "port": 8000, "targetPort": "http"},
                                                        {"name": "grpc", "port": 8001, "targetPort": "grpc",
                                                         "appProtocol": "grpc"},
                                                        {"name": "metrics", "port": 8002, "targetPort": "metrics"}]}}
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": f"{name}-triton",
                                                                                           "labels": labels},
              "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": [
                  {"from": [{"podSelector": {"matchLabels": {"harness/triton-client": "true"}}}],
                   "ports": [{"port": "http"}, {"port": "grpc"}, {"port": "metrics"}]},
                  {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
                   "ports": [{"port": "metrics"}]}]}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": volume, "labels": labels},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}}}
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [claim, job, deployment, service, policy]},
                      indent=1) + "\n"
