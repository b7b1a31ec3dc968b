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
