"""The deployment's ``docker-compose.yml``: each TensorRT engine built by the release's trtexec
(``build_engine.py``, as this project's own compose and Kubernetes Job build theirs), then Triton
serving the folder, locked down as the project's own (``docker-compose.yml``, docs/gpu.md): every
flag below has its twin there. Both images are built from the folder itself
(:mod:`harness.deploy.standalone`): the file names no path outside it, so the folder can be moved."""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.deploy.standalone import BUILDER_FILE, DOCKERFILE, ENGINE_DIR, ENGINE_DOCKERFILE, MANIFEST_FILE
from harness.manifest import load_manifest

ENGINE_VOLUME = "classifier-engine"


def compose_file(models: list[str], name: str, engines: list[str] = ("classifier",),
                 versions: Mapping[str, Sequence[int]] | None = None) -> str:
    """The compose file of a deployment's folder serving ``models``, ``engines`` of them TensorRT
    engines it builds first (the folder is the build context of both images): one builder and one
    volume for each version of an engine (``versions``: by engine; version 1 alone by default),
    mounted at its version folder."""
    manifest = load_manifest()
    built = [(e, v) for e in engines for v in (versions or {}).get(e, (1,))]
    restricted = "model-repository,logging,trace,shared-memory:admin-key=${TRITON_ADMIN_KEY:?set TRITON_ADMIN_KEY to a " \
                 "secret, e.g. openssl rand -hex 32}"
    loads = "".join(f"      - --load-model={m}\n" for m in models)
    gpu = ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
           "            - {driver: nvidia, count: 1, capabilities: [gpu]}\n")
    builders = "".join(_builder(engine, version, manifest.release, gpu) for engine, version in built)
    engine_mounts = "".join(f"      - {{type: volume, source: {_volume(e, v)}, target: /models/{e}/{v}, read_only: true}}\n"
                            for e, v in built)
    depends = "".join(f"      {_service(e, v)}:\n        condition: service_completed_successfully\n" for e, v in built)
    volumes = "".join(f"  {_volume(e, v)}:\n" for e, v in built)
    return f"""# The production profile of the deployment `harness deploy` wrote in this folder:
#   docker compose up -d     # builds the TensorRT engines ({', '.join(engines)}), then serves this folder with Triton
#   harness check IMAGES --url 127.0.0.1:8001 --reference ...   # then check what it serves
# The engines are built by the TensorRT of Triton {manifest.release} (an engine loads only in the TensorRT that
# built it; {ENGINE_DOCKERFILE}), the serving image is the project's (DALI {manifest.dali.version}; {DOCKERFILE}), both from
# this folder: put the harness's wheel here first (pip wheel --no-deps HARNESS_PROJECT -w .). Set TRITON_ADMIN_KEY.
name: {name}

services:
{builders}  triton:
    build:
      context: .
      dockerfile: {DOCKERFILE}
    image: harness-triton:{manifest.release}
    command:
      - tritonserver
      - --model-repository=/models
      - --model-control-mode=explicit
{loads}      - --strict-readiness=true
      - --exit-on-error=true
      - --backend-config=python,shm-default-byte-size=33554432
      - "--http-restricted-api={restricted}"
      - "--grpc-restricted-protocol={restricted}"
    ports:
      - "${{TRITON_BIND:-127.0.0.1}}:8000:8000"
      - "${{TRITON_BIND:-127.0.0.1}}:8001:8001"
      - "${{TRITON_BIND:-127.0.0.1}}:8002:8002"
    volumes:
      - {{type: bind, source: ., target: /models, read_only: true}}
{engine_mounts}    shm_size: 1gb
    read_only: true
    tmpfs: [/tmp]
    cap_drop: [ALL]
    security_opt: ["no-new-privileges:true"]
    ulimits:
      memlock: -1
      stack: 67108864
    healthcheck:
      test: ["CMD", "curl", "-fsS", "http://localhost:8000/v2/health/ready"]
      interval: 10s
      timeout: 5s
      retries: 3
      start_period: 5m
    depends_on:
{depends}{gpu}
volumes:
{volumes}"""


def _service(engine: str, version: int = 1) -> str:
    """The service building ``engine``'s ``version`` (the project's own classifier's keeps its name, ``engine-builder``;
    a later version's ends in ``-v2``)."""
    service = "engine-builder" if engine == "classifier" else f"engine-builder-{engine}"
    return service if version == 1 else f"{service}-v{version}"


def _volume(engine: str, version: int = 1) -> str:
    volume = ENGINE_VOLUME if engine == "classifier" else f"{engine}-engine"
    return volume if version == 1 else f"{engine}-v{version}-engine"


def _builder(engine: str, version: int, release: str, gpu: str) -> str:
    which = "" if version == 1 else f', "--version", "{version}"'
    return f"""  {_service(engine, version)}:
    build:
      context: .
      dockerfile: {ENGINE_DOCKERFILE}
    image: harness-engine-builder:{release}
    command: ["python3", "{ENGINE_DIR}/{BUILDER_FILE}", "--manifest", "{ENGINE_DIR}/{MANIFEST_FILE}", "--repository", "/models",
              "--model", "{engine}"{which}, "--out", "/engine"]
    environment:
      FP16: ${{FP16:-0}}
      OPT_BATCH: ${{OPT_BATCH:-8}}
    volumes:
      - {{type: bind, source: ., target: /models, read_only: true}}
      - {{type: volume, source: {_volume(engine, version)}, target: /engine}}
{gpu}
"""
