"""What the engine builder needs of a TensorRT model's config, written beside it as JSON.

``docker/build_engine.py`` runs in the TensorRT image, which has neither protobuf nor Triton's
``ModelConfig`` schema, so it reads no ``config.pbtxt``: the harness, which parses configs with
Triton's protobuf (:func:`harness.repository.save_config`, :func:`~harness.repository.write_engine_input`),
writes ``engine_input.json`` beside every ``tensorrt_plan`` config it writes (the checked-in ones
are held to their configs by tests/test_engine_input.py). The file records the config's SHA-256,
so a config edited afterwards is refused instead of built with stale shapes.

Standard library only (with :mod:`harness.errors`): the TensorRT image imports it from the checkout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.errors import HarnessError

FILENAME = "engine_input.json"
CONFIG = "config.pbtxt"
HOW_TO_WRITE = ("rewrite it with `harness deploy` (a deployment) or harness.repository.write_engine_input(MODEL_DIR) "
                "(this repository's models)")


class EngineInputError(HarnessError, ValueError):
    """A model's engine_input.json is missing, malformed or older than its config."""


@dataclass(frozen=True)
class EngineInput:
    """The model input the engine's optimization profile is built for, as its config declares it."""

    max_batch_size: int
    name: str
    """The input tensor's name (the profile's shapes are given by name)."""
    dims: tuple[int, ...]
    """Its dimensions after the batch; -1 where each request has its own (the detector's H and W)."""
    spec: str | None
    """The spec file the config names (its ``spec`` parameter: the detector's ``detection.toml``), if any."""
    config_sha256: str
    """The SHA-256 of the ``config.pbtxt`` it was read from."""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "dims": list(self.dims)}, indent=2) + "\n"


def config_digest(config: Path) -> str:
    """The SHA-256 of a config file's bytes, line ends as LF (a Windows checkout's CRLF is the same config)."""
    return hashlib.sha256(config.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def version_file(model_dir: Path, version: int, filename: str) -> Path:
    """Where version ``version`` of the model in ``model_dir`` keeps ``filename`` (its ONNX): version 1 beside
    its config, where this repository's models and every deployment keep it; a later version (``harness deploy
    --name`` again) in its own version folder, ``2/model.onnx``, which its engine ``2/model.plan`` is built from."""
    if version < 1:
        raise EngineInputError(f"{model_dir}: version {version}: Triton's versions are whole numbers from 1")
    return model_dir / filename if version == 1 else model_dir / str(version) / filename


def read_engine_input(model_dir: Path) -> EngineInput:
    """The :class:`EngineInput` of ``model_dir``, or :class:`EngineInputError` naming why not."""
    path = model_dir / FILENAME
    if not path.is_file():
        raise EngineInputError(f"{path} not found: {HOW_TO_WRITE}")
    try:
        table = json.loads(path.read_text())
        found = EngineInput(int(table["max_batch_size"]), str(table["name"]), tuple(int(d) for d in table["dims"]),
                            table["spec"], str(table["config_sha256"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise EngineInputError(f"{path}: not an engine input file ({exc})") from None
    config = model_dir / CONFIG
    if not config.is_file() or config_digest(config) != found.config_sha256:
        raise EngineInputError(f"{path} was not written from {config} as it is now: {HOW_TO_WRITE}")
    return found
