"""A foreign deployment for the tests and the benchmarks: the checked-in example repository
(``examples/foreign_deployment/repository``: BYTES input, a Python-backend preprocessing
step with NHWC float output, a layout step, an ONNX classifier step, an ensemble, none of
this project's names), written with its parameters set and served by the embedded
tritonserver on free loopback ports."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.paths import PROJECT_ROOT
from harness.server import TritonServer, free_port

EXAMPLE = PROJECT_ROOT / "examples" / "foreign_deployment"
REPOSITORY = EXAMPLE / "repository"
TRAINING_SPEC = EXAMPLE / "training.toml"
ENSEMBLE = "image_classifier"
STEPS = ("jpeg_to_tensor", "hwc_to_chw", "effnet_scores")
PLANTED = {"resize_antialias": False, "channel_order": "BGR"}
"""The two classic differences planted (see :func:`write_foreign_repository`)."""


def _edit(config_path: Path, edit) -> None:
    config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
    edit(config)
    config_path.write_text(text_format.MessageToString(config))


def write_foreign_repository(out: Path, onnx: Path, *, resize_antialias: bool = True, channel_order: str = "RGB",
                             batched: bool = True) -> Path:
    """A copy of the example repository in ``out`` serving ``onnx``; ``resize_antialias``
    False and ``channel_order`` "BGR" plant the two classic differences (see its models);
    ``batched`` False writes every model with ``max_batch_size: 0``."""
    shutil.copytree(REPOSITORY, out, ignore=shutil.ignore_patterns(".gitkeep", "__pycache__"))
    (out / ENSEMBLE / "1").mkdir(exist_ok=True)
    parameters = {"jpeg_to_tensor": {"resize_antialias": str(resize_antialias).lower()},
                  "hwc_to_chw": {"channel_order": channel_order},
                  "effnet_scores": {"onnx_path": str(Path(onnx).resolve())}}

    for model in (*STEPS, ENSEMBLE):
        def edit(config, model=model):
            for key, value in parameters.get(model, {}).items():
                config.parameters[key].string_value = value
            if not batched:
                config.max_batch_size = 0
                config.ClearField("dynamic_batching")
        _edit(out / model / "config.pbtxt", edit)
    return out


@contextlib.contextmanager
def serve_foreign(out: Path, onnx: Path, **parameters) -> Iterator[TritonServer]:
    """The foreign repository written to ``out`` (see :func:`write_foreign_repository`), served
    for the block; the server is stopped by its PID and must have exited."""
    repository = write_foreign_repository(out, onnx, **parameters)
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"


BATCH_DEPENDENT_MODEL = '''"""The example's classifier step with a batch-dependent fault planted (written by the tests):
every request after the first of an executed batch gets its class-0 logit raised by 20, as an
engine whose batched kernels differ answers (NVIDIA/TensorRT #4796). Alone, it answers right."""

import importlib.util

import numpy as np
import triton_python_backend_utils as pb_utils

_spec = importlib.util.spec_from_file_location("effnet_scores_example", {example!r})
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)


class TritonPythonModel(_example.TritonPythonModel):
    def execute(self, requests):
        responses = []
        for position, request in enumerate(requests):
            x = pb_utils.get_input_tensor_by_name(request, "pixels_nchw").as_numpy()
            scores = np.array(self.session.run([self.output], {{self.input: x}})[0], np.float32)
            if position:
                scores[:, 0] += 20.0
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("class_scores", scores)]))
        return responses
'''
BATCH_WINDOW_US = 20000
"""The batch-dependent classifier's dynamic batching waits this long for company, so that a
few concurrent clients make batches (on 2 cores the steps before it rarely queue otherwise)."""


@contextlib.contextmanager
def serve_batch_dependent(out: Path, onnx: Path) -> Iterator[TritonServer]:
    """The foreign repository (:func:`write_foreign_repository`, nothing else planted) whose
    classifier step answers wrongly inside a batch (:data:`BATCH_DEPENDENT_MODEL`), served for
    the block; stopped by its PID, checked exited."""
    repository = write_foreign_repository(out, onnx)
    step = repository / STEPS[2]
    (step / "1" / "model.py").write_text(BATCH_DEPENDENT_MODEL.format(example=str(REPOSITORY / STEPS[2] / "1" / "model.py")))
    _edit(step / "config.pbtxt",
          lambda config: setattr(config.dynamic_batching, "max_queue_delay_microseconds", BATCH_WINDOW_US))
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"


EMBEDDING_ENSEMBLE = "photo_search"
EMBEDDING_STEP = "image_descriptor"
DESCRIPTOR_MODEL = '''"""The embedder ONNX in ONNX Runtime, its output returned as ``descriptor`` (written by the
tests: a foreign embedding deployment). ``plant_zero_below`` / ``plant_nan_above``: an image
whose mean input value is below / above that answers a zero vector / a NaN (bad outputs)."""

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(params["onnx_path"], options, providers=["CPUExecutionProvider"])
        self.zero_below = float(params.get("plant_zero_below", "-inf"))
        self.nan_above = float(params.get("plant_nan_above", "inf"))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "chw").as_numpy()
            out = self.session.run(None, {"input": x})[0].astype(np.float32)
            for i, image in enumerate(x):
                if image.mean() < self.zero_below:
                    out[i] = 0.0
                if image.mean() > self.nan_above:
                    out[i, 7] = np.nan
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("descriptor", np.ascontiguousarray(out))]))
        return responses
'''


def write_foreign_embedding_repository(out: Path, embedder: Path, **plant: float) -> Path:
    """A foreign embedding deployment in ``out``: the example's BYTES-input preprocessing steps
    (PIL decode and stretch, layout and ImageNet normalization), then ``image_descriptor`` (the
    embedder ONNX, output ``descriptor`` [1280]) in an ensemble ``photo_search`` with output
    ``vector_out``: none of this project's names. ``plant`` sets ``plant_zero_below`` /
    ``plant_nan_above`` (see the model)."""
    out.mkdir(parents=True)
    for step in STEPS[:2]:
        shutil.copytree(REPOSITORY / step, out / step, ignore=shutil.ignore_patterns("__pycache__"))
    (out / EMBEDDING_STEP / "1").mkdir(parents=True)
    (out / EMBEDDING_STEP / "1" / "model.py").write_text(DESCRIPTOR_MODEL)
    parameters = {"onnx_path": str(Path(embedder).resolve()), **{k: str(v) for k, v in plant.items()}}
    (out / EMBEDDING_STEP / "config.pbtxt").write_text(
        f'name: "{EMBEDDING_STEP}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "chw" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "descriptor" data_type: TYPE_FP32 dims: [ 1280 ] } ]\n'
        'dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n'
        + "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()))
    (out / EMBEDDING_ENSEMBLE / "1").mkdir(parents=True)
    (out / EMBEDDING_ENSEMBLE / "config.pbtxt").write_text(f'''name: "{EMBEDDING_ENSEMBLE}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "encoded_image" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "vector_out" data_type: TYPE_FP32 dims: [ 1280 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "jpeg_to_tensor" model_version: -1 input_map {{ key: "encoded" value: "encoded_image" }}
     output_map {{ key: "image_nhwc" value: "nhwc" }} }},
  {{ model_name: "hwc_to_chw" model_version: -1 input_map {{ key: "image_nhwc" value: "nhwc" }}
     output_map {{ key: "pixels_nchw" value: "nchw" }} }},
  {{ model_name: "{EMBEDDING_STEP}" model_version: -1 input_map {{ key: "chw" value: "nchw" }}
     output_map {{ key: "descriptor" value: "vector_out" }} }}
] }}
''')
    return out


@contextlib.contextmanager
def serve_foreign_embedding(out: Path, embedder: Path, **plant: float) -> Iterator[TritonServer]:
    """:func:`write_foreign_embedding_repository` served for the block (stopped by its PID, checked exited)."""
    repository = write_foreign_embedding_repository(out, embedder, **plant)
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"
