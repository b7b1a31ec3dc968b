"""A foreign detection deployment for the tests: the checked-in example repository
(``examples/foreign_detection/repository``: BYTES input ``image_bytes``, an OpenCV letterbox
step answering the normalized tensor and a ``letterbox`` record, the PP-OCRv6 detector in ONNX
Runtime, a postprocessing step with two inputs answering ``boxes [-1, 4]`` and ``scores [-1]``,
an ensemble ``find_text``; none of this project's names), written at a CI-sized letterbox with
variants beside it and served by the embedded tritonserver on free loopback ports.

A :class:`Variant` is another ensemble in the same repository: copies of the steps whose
parameters it sets (named ``<step>_<variant>``), or of every step when it does not batch;
``map_only`` ends it at the detector (it answers the map ``text_map``, no boxes). One server
serves them all, so each test pays for the checks, not for a server."""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from harness.paths import PROJECT_ROOT
from harness.server import TritonServer, free_port

EXAMPLE = PROJECT_ROOT / "examples" / "foreign_detection"
REPOSITORY = EXAMPLE / "repository"
TRAINING_SPEC = EXAMPLE / "training.toml"
POSTPROCESS = EXAMPLE / "postprocess.py"
ENSEMBLE = "find_text"
STEPS = ("letterbox_image", "text_detector", "boxes_from_map")
MAP_OUTPUT = "text_map"
"""The output of a ``map_only`` variant."""


@dataclass(frozen=True)
class Variant:
    parameters: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Step -> its parameters set (config.pbtxt ``parameters``)."""
    batched: bool = True
    map_only: bool = False


def _config(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _write(path: Path, config) -> None:
    path.write_text(text_format.MessageToString(config))


def write_foreign_detection_repository(out: Path, variants: Mapping[str, Variant] | None = None,
                                       size: int = 320, nms: bool = False) -> Path:
    """A copy of the example repository in ``out``, letterboxing to ``size``, with ``variants``
    (ensemble name -> :class:`Variant`) beside ``find_text``; ``nms``: and :data:`NMS_MODEL`."""
    shutil.copytree(REPOSITORY, out, ignore=shutil.ignore_patterns(".gitkeep", "__pycache__"))
    (out / ENSEMBLE / "1").mkdir(exist_ok=True)
    letterbox = _config(out / "letterbox_image" / "config.pbtxt")
    letterbox.parameters["size"].string_value = str(size)
    _write(out / "letterbox_image" / "config.pbtxt", letterbox)
    for name, variant in (variants or {}).items():
        renamed = {}
        for step in STEPS:
            if step not in variant.parameters and variant.batched:
                continue
            copy = f"{step}_{name}"
            shutil.copytree(out / step, out / copy, ignore=shutil.ignore_patterns("__pycache__"))
            config = _config(out / copy / "config.pbtxt")
            config.name = copy
            for key, value in variant.parameters.get(step, {}).items():
                config.parameters[key].string_value = value
            if not variant.batched:
                config.max_batch_size = 0
                config.ClearField("dynamic_batching")
            _write(out / copy / "config.pbtxt", config)
            renamed[step] = copy
        ensemble = _config(out / ENSEMBLE / "config.pbtxt")
        ensemble.name = name
        if not variant.batched:
            ensemble.max_batch_size = 0
        for step in ensemble.ensemble_scheduling.step:
            step.model_name = renamed.get(step.model_name, step.model_name)
        if variant.map_only:
            del ensemble.ensemble_scheduling.step[2]
            del ensemble.ensemble_scheduling.step[0].output_map["letterbox"]
            ensemble.ensemble_scheduling.step[1].output_map["probability"] = MAP_OUTPUT
            del ensemble.output[:]
            ensemble.output.add(name=MAP_OUTPUT, data_type=model_config_pb2.TYPE_FP32, dims=[1, -1, -1])
        (out / name / "1").mkdir(parents=True)
        _write(out / name / "config.pbtxt", ensemble)
    if nms:
        _write_nms_model(out, size)
    return out


NMS_MODEL = "find_text_nms"
"""A single model doing all of ``find_text`` and answering EfficientNMS's outputs (``nms=True``)."""
NMS_SOURCE = '''"""All of find_text in one model (written by the tests): the example's letterbox, the detector
and its boxes, answered the EfficientNMS way: num_dets INT32 [1], det_boxes FP32 [100, 4],
det_scores FP32 [100], det_classes INT32 [100] (class 0), only the first num_dets rows counting."""

import importlib.util
import json
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

MAX = 100


def _load(path):
    spec = importlib.util.spec_from_file_location(Path(path).parent.parent.name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        example, self.size = Path(params["example"]), int(params["size"])
        self.letterbox = _load(example / "letterbox_image" / "1" / "model.py").letterbox
        post = _load(example / "boxes_from_map" / "1" / "model.py")
        self.boxes_of, self.params = post.boxes_of, post.DbParams()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(params["onnx_path"], options, providers=["CPUExecutionProvider"])

    def detect(self, data):
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        canvas, info = self.letterbox(image, self.size, "center", 114)
        x = ((canvas.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]
        boxes, scores = self.boxes_of(self.session.run(None, {self.session.get_inputs()[0].name: x})[0][0], info,
                                      self.params)
        n = min(len(boxes), MAX)
        det_boxes, det_scores = np.zeros((MAX, 4), np.float32), np.zeros(MAX, np.float32)
        det_boxes[:n], det_scores[:n] = boxes[:n], scores[:n]
        return np.array([n], np.int32), det_boxes, det_scores, np.zeros(MAX, np.int32)

    def execute(self, requests):
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "image_bytes").as_numpy().reshape(-1)
            found = [self.detect(bytes(item)) for item in encoded]
            names = ("num_dets", "det_boxes", "det_scores", "det_classes")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(name, np.stack([f[i] for f in found]))
                                                         for i, name in enumerate(names)]))
        return responses
'''


def _write_nms_model(out: Path, size: int) -> None:
    from harness.detection.detector import model_path

    (out / NMS_MODEL / "1").mkdir(parents=True)
    (out / NMS_MODEL / "1" / "model.py").write_text(NMS_SOURCE)
    parameters = {"example": str(REPOSITORY.resolve()), "size": str(size), "onnx_path": str(model_path())}
    (out / NMS_MODEL / "config.pbtxt").write_text(
        f'name: "{NMS_MODEL}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "image_bytes" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "num_dets" data_type: TYPE_INT32 dims: [ 1 ] },\n'
        '  { name: "det_boxes" data_type: TYPE_FP32 dims: [ 100, 4 ] },\n'
        '  { name: "det_scores" data_type: TYPE_FP32 dims: [ 100 ] },\n'
        '  { name: "det_classes" data_type: TYPE_INT32 dims: [ 100 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
        + "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()))


@contextlib.contextmanager
def serve_foreign_detection(out: Path, variants: Mapping[str, Variant] | None = None,
                            size: int = 320, nms: bool = False) -> Iterator[TritonServer]:
    """:func:`write_foreign_detection_repository` served for the block (stopped by its PID,
    checked exited)."""
    repository = write_foreign_detection_repository(out, variants, size, nms)
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"
