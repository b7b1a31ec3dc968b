# `harness layers` with TensorRT: the image of the compose `layers` service. The TensorRT
# image of deploy/versions.toml's release (the engine builder's: `trt` executions build with
# the TensorRT that serves), plus a virtualenv holding what `harness layers` imports, at the
# versions requirements.lock pins. Built once (`docker compose build layers`, or by the first
# `docker compose run --rm layers`); nothing is installed when it runs. Nothing goes into the
# image's system Python either (PEP 668: Ubuntu 24.04 marks it externally managed): the
# virtualenv sees the image's own TensorRT Python bindings through --system-site-packages,
# and its own packages come first. The harness itself is mounted from the checkout.
#
# Build context: the project root (docker-compose.yml sets it); layers.Dockerfile.dockerignore
# lets in requirements.lock and deploy/versions.toml only.
FROM nvcr.io/nvidia/tensorrt:26.06-py3

COPY requirements.lock deploy/versions.toml /opt/layers-build/

# What `harness layers` imports for its onnx, onnx-fp16 and trt executions and its report,
# with every dependency (Python 3.12's): --no-deps, so each is the lock's version (-c) and
# nothing else comes in. tests/test_images.py checks the list: all pinned by the lock, closed
# under their requirements, and holding what a real run imports. The torch execution is
# left out (PyTorch and its CUDA wheels are gigabytes; the layers compared are the ONNX's).
ARG LAYERS_PACKAGES="contourpy cycler flatbuffers fonttools kiwisolver markdown-it-py matplotlib mdurl ml-dtypes numpy onnx onnxconverter-common onnxruntime opencv-python-headless packaging pillow polygraphy protobuf pygments pyparsing python-dateutil rich scipy shapely simplejpeg typing-extensions tzdata"
RUN python3 -m venv --without-pip --system-site-packages /opt/layers \
    && python3 -m pip --python /opt/layers/bin/python install --no-cache-dir --disable-pip-version-check \
        --no-deps -c /opt/layers-build/requirements.lock ${LAYERS_PACKAGES} \
    && /opt/layers/bin/python -c "import tomllib, tensorrt, onnxruntime, polygraphy.backend.trt, cv2, matplotlib.pyplot; \
want = tomllib.load(open('/opt/layers-build/versions.toml', 'rb'))['tensorrt']['version']; \
assert tensorrt.__version__.split('.')[:3] == want.split('.'), f'TensorRT {tensorrt.__version__}, the manifest has {want}'"
# (That check fails the build if the virtualenv cannot import what a run needs, or if the
# TensorRT it sees is not the manifest's.)

ENV VIRTUAL_ENV=/opt/layers PATH=/opt/layers/bin:${PATH}
