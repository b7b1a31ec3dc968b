# The harness's own environment, for Kubernetes (deploy/kubernetes/): the sharded check and
# its merge, the Locust master and workers, and the files the engine-build and preflight Jobs
# copy from it (the model repository with its ONNX, the engine builder, the manifest, the
# known answers). The same Python and pinned packages as the virtualenv (requirements.lock):
# the reference runs on the CPU, the server is reached over the network.
#
# Build context: the project root after `make setup` (it exports the ONNX, gathers
# data/photos and records build/preflight); harness.Dockerfile.dockerignore keeps it to
# what is copied. Tag: harness:<release of deploy/versions.toml> (tests/test_kubernetes.py).
FROM python:3.11.14-slim-bookworm

WORKDIR /opt/project
COPY requirements.lock pyproject.toml README.md LICENSE ./
RUN pip install --no-cache-dir -r requirements.lock
COPY harness harness
COPY loadtest loadtest
RUN pip install --no-cache-dir --no-deps -e . && harness --help >/dev/null
COPY deploy/versions.toml deploy/versions.toml
COPY docker/build_engine.py docker/build_engine.py
COPY model_repository model_repository
COPY data/photos data/photos
COPY build/preflight build/preflight

# The check writes its reports to a mounted volume; nothing else is written at run time.
ENV PYTHONDONTWRITEBYTECODE=1

# Not root (issue 35): every pod runs as uid 1000 (deploy/kubernetes sets runAsNonRoot), with a
# read-only root filesystem: what it writes goes to its volumes and /tmp.
RUN useradd --uid 1000 --user-group --no-create-home --home-dir /tmp harness \
    && mkdir -p build/watch && chown harness:harness build/watch   # harness watch's record (a volume)
USER 1000:1000
ENV HOME=/tmp
