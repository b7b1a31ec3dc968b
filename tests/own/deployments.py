"""Deployments of the tests' own making, in the common shapes users build (none of this
project's names, no harness code inside the models), written as Triton repositories and
served by the embedded tritonserver:

- ``normalized_nhwc``: an ensemble ``norm_classifier`` whose first step decodes, resizes,
  crops and normalizes (ImageNet mean/std) into NHWC float32, a layout step to NCHW, and the
  classifier (ONNX Runtime);
- ``softmax_only``: one model ``softmax_only`` taking the file (UINT8 [-1], ragged) and
  answering only probabilities;
- ``net`` and ``scaled_net``: models fed by the client's own preprocessing
  (``tests/own/clients.py``): the normalized CHW image, or a 0-255 image and a scale factor.

Every preprocessing is :mod:`image_prep` (copied beside each model); ``channel_order`` "BGR"
and ``mode`` "stretch" plant the classic mistakes. The training they are checked against is
``training.toml``.
"""

from __future__ import annotations

import contextlib
import shutil
import textwrap
from pathlib import Path
from typing import Iterator

from harness.server import TritonServer, free_port

HERE = Path(__file__).resolve().parent
TRAINING_SPEC = HERE / "training.toml"
CLIENTS = HERE / "clients.py"
PREP = HERE / "image_prep.py"

_HEADER = '''
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_prep  # noqa: E402


def parameter(args, key, default):
    config = json.loads(args["model_config"])
    return config.get("parameters", {}).get(key, {}).get("string_value", default)


def error(exc):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc).strip().splitlines()[0]))


def onnx(args):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(parameter(args, "onnx_path", ""), options, providers=["CPUExecutionProvider"])
    return session, session.get_inputs()[0].name
'''

MODELS = {
    "prep_nhwc": '''
class TritonPythonModel:
    def initialize(self, args):
        self.order, self.mode = parameter(args, "channel_order", "RGB"), parameter(args, "mode", "shorter_side")

    def execute(self, requests):
        out = []
        for request in requests:
            files = pb_utils.get_input_tensor_by_name(request, "jpeg").as_numpy().reshape(-1)
            try:
                x = np.stack([image_prep.normalized_nhwc(bytes(f), self.order, self.mode) for f in files])
            except Exception as exc:
                out.append(error(exc))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("normalized_nhwc", x)]))
        return out
''',
    "to_nchw": '''
class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", np.ascontiguousarray(x.transpose(0, 3, 1, 2)))]))
        return out
''',
    "net": '''
class TritonPythonModel:
    def initialize(self, args):
        self.session, self.input = onnx(args)

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "pixels").as_numpy()
            logits = self.session.run(["logits"], {self.input: np.ascontiguousarray(x, np.float32)})[0]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("logits", logits.astype(np.float32))]))
        return out
''',
    "scaled_net": '''
class TritonPythonModel:
    def initialize(self, args):
        self.session, self.input = onnx(args)

    def execute(self, requests):
        out = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
            factor = pb_utils.get_input_tensor_by_name(request, "scale_factor").as_numpy()
            x = (image * factor.reshape(-1, 1, 1, 1) * 255 - image_prep.MEAN[:, None, None]) / image_prep.STD[:, None, None]
            logits = self.session.run(["logits"], {self.input: np.ascontiguousarray(x, np.float32)})[0]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("logits", logits.astype(np.float32))]))
        return out
''',
    "softmax_only": '''
class TritonPythonModel:
    def initialize(self, args):
        self.session, self.input = onnx(args)
        self.order, self.mode = parameter(args, "channel_order", "RGB"), parameter(args, "mode", "shorter_side")

    def execute(self, requests):
        out = []
        for request in requests:
            files = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
            try:
                x = np.stack([image_prep.normalized_nhwc(f.tobytes(), self.order, self.mode)
                              for f in files]).transpose(0, 3, 1, 2)
            except Exception as exc:
                out.append(error(exc))
                continue
            logits = self.session.run(["logits"], {self.input: np.ascontiguousarray(x, np.float32)})[0].astype(np.float64)
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("probs", probs)]))
        return out
''',
}

CONFIGS = {
    "prep_nhwc": '''
backend: "python"
max_batch_size: 8
input [ { name: "jpeg" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "normalized_nhwc" data_type: TYPE_FP32 dims: [ 224, 224, 3 ] } ]
''',
    "to_nchw": '''
backend: "python"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 224, 224, 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
''',
    "net": '''
backend: "python"
max_batch_size: 8
input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
''',
    "scaled_net": '''
backend: "python"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] },
        { name: "scale_factor" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
''',
    "softmax_only": '''
backend: "python"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1000 ] } ]
''',
    "norm_classifier": '''
platform: "ensemble"
max_batch_size: 8
input [ { name: "image_bytes" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "class_logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling { step [
  { model_name: "prep_nhwc" model_version: -1 input_map { key: "jpeg" value: "image_bytes" }
    output_map { key: "normalized_nhwc" value: "nhwc" } },
  { model_name: "to_nchw" model_version: -1 input_map { key: "x" value: "nhwc" } output_map { key: "y" value: "nchw" } },
  { model_name: "net" model_version: -1 input_map { key: "pixels" value: "nchw" }
    output_map { key: "logits" value: "class_logits" } } ] }
''',
}

SHAPES = {
    "normalized_nhwc": ("norm_classifier", "prep_nhwc", "to_nchw", "net"),
    "softmax_only": ("softmax_only",),
    "client": ("net", "scaled_net"),
}
"""Shape -> the models its repository holds."""


def write_repository(out: Path, shapes: str | tuple[str, ...], onnx: Path, **parameters: str) -> Path:
    """A repository of one shape, or several, in ``out``, its classifier ``onnx``;
    ``parameters`` (``channel_order``, ``mode``) go to every model (those that read them)."""
    shapes = (shapes,) if isinstance(shapes, str) else shapes
    for model in dict.fromkeys(m for shape in shapes for m in SHAPES[shape]):
        folder = out / model
        (folder / "1").mkdir(parents=True)
        settings = {"onnx_path": str(Path(onnx).resolve()), **parameters}
        config = (f'name: "{model}"\n' + textwrap.dedent(CONFIGS[model]).strip() + "\n" + "".join(
            f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in settings.items())
            + ("instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n"
               if "ensemble_scheduling" not in CONFIGS[model] else ""))
        (folder / "config.pbtxt").write_text(config)
        if model in MODELS:
            (folder / "1" / "model.py").write_text(_HEADER + MODELS[model])
            shutil.copy(PREP, folder / "1" / PREP.name)
    return out


@contextlib.contextmanager
def serve(out: Path, shapes: str | tuple[str, ...], onnx: Path, **parameters: str) -> Iterator[TritonServer]:
    """The repository of ``shapes`` written to ``out`` and served for the block; the server is
    stopped by its PID and must have exited."""
    repository = write_repository(out, shapes, onnx, **parameters)
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"
