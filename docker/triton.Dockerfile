# The Triton server of the gpu profile: the official image (DALI, TensorRT and Python
# backends) plus what the repository's Python code imports.
#
# Build context: the project root (docker-compose.yml sets it); triton.Dockerfile.dockerignore
# keeps the context to what the package is built from: pyproject.toml, setup.py, README.md,
# LICENSE, harness/ and loadtest/ (preflight reads Triton metrics with loadtest.metrics), and
# the files setup.py ships inside it (the model repository's text files, the engine builder,
# the manifest).
FROM nvcr.io/nvidia/tritonserver:26.06-py3

# The release is deploy/versions.toml's (tests/test_manifest.py checks it): its DALI, the
# one the DALI backend autoserializes preprocess_dali*/1/dali.py with, is the DALI the
# virtualenv's tests define and serialize the same pipelines with.
#
# Whose numpy: this image sets PYTHONPATH to DALI's wheel folder, which dali_backend filled with
# DALI *and its dependencies* (numpy unpinned, so 2.x), ahead of the site-packages where the
# Python backend's numpy<2 and the pins below go; dali_backend autoserializes with `python3`
# in the server's environment, so DALI would run that numpy too. deploy/versions.toml
# [pythonpath] cites the sources. The site-packages go first (DALI 2.1.1 + numpy 1.26.4 is
# what the virtualenv tests), and the build stops if the base image's PYTHONPATH is not the
# one the manifest documents (a regular nvidia package in the site-packages would hide DALI:
# the import check below fails then). tests/test_manifest.py checks these lines against the manifest.
ARG IMAGE_PYTHONPATH=/opt/tritonserver/backends/dali/wheel/dali
ARG SITE_PACKAGES=/usr/local/lib/python3.12/dist-packages
RUN python3 -c "import os, sys; found = [p for p in os.environ.get('PYTHONPATH', '').split(':') if p]; \
sys.exit(0 if found == '${IMAGE_PYTHONPATH}'.split(':') else f'the base image PYTHONPATH is {found}, not deploy/versions.toml [pythonpath] image')"
ENV PYTHONPATH=${SITE_PACKAGES}:${IMAGE_PYTHONPATH}

# numpy stays < 2 (the Python backend's tensors and the harness are tested with 1.26);
# opencv-python-headless 4.11 is the last release built for numpy 1. Pillow and simplejpeg
# check images in validate_image; pyclipper and shapely grow and measure the text detector's
# boxes in detect_postprocess (and detection.toml's [postprocess] is checked with them wherever
# the spec is read: the DALI autoserialization of detect_preprocess_dali* too); the versions
# are requirements.lock's, the project environment's (tests/test_compose.py checks). tritonclient is for `harness preflight`
# inside this image.
# The image already sets PIP_BREAK_SYSTEM_PACKAGES; the flag says it here too (Ubuntu 24.04
# marks its Python as externally managed, and this image's Python *is* the backends' environment).
ARG NUMPY_VERSION=1.26.4
RUN pip install --no-cache-dir --break-system-packages \
        numpy==${NUMPY_VERSION} \
        opencv-python-headless==4.11.0.86 \
        pillow==13.0.0 \
        simplejpeg==1.9.0 \
        pyclipper==1.4.0 \
        shapely==2.2.0 \
        "tritonclient[http,grpc]==2.73.0"

# The models (preprocess_dali*/1/dali.py, preprocess_opencv/1/model.py) import the
# harness package. --no-deps: its other dependencies (torch, DALI wheel, ...) are for the
# harness's own tools, not the server; DALI comes with the image's DALI backend (on
# PYTHONPATH, used for autoserialization). This image's Python is 3.12, in the package's range
# (>=3.11,<3.13). setup.py ships the repository's templates, the engine builder and the manifest
# inside the package (harness/_data), as every wheel of the harness does.
COPY pyproject.toml setup.py README.md LICENSE /src/harness-project/
COPY harness /src/harness-project/harness
COPY loadtest /src/harness-project/loadtest
COPY model_repository /src/harness-project/model_repository
COPY docker/build_engine.py /src/harness-project/docker/build_engine.py
COPY deploy/versions.toml /src/harness-project/deploy/versions.toml
RUN pip install --no-cache-dir --break-system-packages --no-deps /src/harness-project \
    && rm -rf /src/harness-project \
    && python3 -c "import numpy, nvidia.dali, harness.preprocessing.opencv, harness.preprocessing.dali_graph, harness.preflight, loadtest.metrics, harness.detection.postprocess, harness.detection.compare; \
assert numpy.__version__ == '${NUMPY_VERSION}' and numpy.__file__.startswith('${SITE_PACKAGES}/'), (numpy.__version__, numpy.__file__); \
assert nvidia.dali.__file__.startswith('${IMAGE_PYTHONPATH}/'), nvidia.dali.__file__"
# (That import check fails the build early if the DALI package autoserialization uses,
# OpenCV, what detect_postprocess or preflight needs, is not importable by the image's python3,
# or if numpy is not the site-packages' 1.26.4: the PYTHONPATH order above decides it.)

# The repository is mounted read-only: do not try to write __pycache__ into it.
ENV PYTHONDONTWRITEBYTECODE=1

# Not root (issue 35): uid 1000 (an unprivileged user of the base image; whatever its name,
# the server needs no other: it only reads /opt/tritonserver and the mounts); the repository and the engines are mounted read-only, the root filesystem is read-only too
# (compose read_only, Kubernetes readOnlyRootFilesystem): Python writes nothing, anything
# temporary (DALI's autoserialization, HOME) goes to the /tmp tmpfs.
USER 1000:1000
ENV HOME=/tmp
