"""Known answers: what the cpu profile serves for a few photos, recorded at build time.

``make setup`` runs ``harness preflight --record`` against the embedded server: for each
known-answer photo it keeps the file bytes, every preprocessing stage of both pipelines
(the taps models) and the logits of both ensembles, plus the DALI operator arguments the
pipeline uses. ``harness preflight`` on a GPU host compares the deployed server with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.client import PIPELINES, TritonClient

ARRAYS = "known_answers.npz"
META = "known_answers.json"
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "grace_hopper.jpg")
"""Known-answer photos of the corpus (data/photos): animals, food, a person; varied sizes."""


@dataclass(frozen=True)
class KnownAnswers:
    """The recorded tensors, by photo name: ``stages[photo][pipeline][stage]``."""

    images: dict[str, bytes]
    stages: dict[str, dict[str, dict[str, np.ndarray]]]
    server: str = ""
    """The version of the server they were recorded from."""
    pipeline_arguments: dict[str, list[str]] = field(default_factory=dict)
    """DALI operator schema name -> the arguments the pipeline passes it."""


def record(client: TritonClient, photos: list[Path], out: Path, pipeline_arguments: dict[str, list[str]]) -> Path:
    """Read the known answers of ``photos`` from a running server into ``out``."""
    arrays, names = {}, []
    for path in photos:
        data = path.read_bytes()
        names.append(path.name)
        arrays[f"{path.name}/image"] = np.frombuffer(data, np.uint8)
        for pipeline in PIPELINES:
            for stage, tensor in client.deployed(data, pipeline).items():
                arrays[f"{path.name}/{pipeline}/{stage}"] = tensor
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / ARRAYS, **arrays)
    meta = {"photos": names, "server": client.server_metadata().get("version", ""),
            "pipeline_arguments": pipeline_arguments}
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")  # written last: marks the record complete
    return out / META


def load(directory: Path) -> KnownAnswers:
    """The known answers recorded in ``directory``; FileNotFoundError says how to make them."""
    if not (directory / META).is_file():
        raise FileNotFoundError(f"no known answers in {directory}: record them with `harness preflight --record` "
                                "(make setup does)")
    meta = json.loads((directory / META).read_text())
    with np.load(directory / ARRAYS) as npz:
        arrays = {key: npz[key] for key in npz.files}
    images, stages = {}, {}
    for photo in meta["photos"]:
        images[photo] = arrays[f"{photo}/image"].tobytes()
        stages[photo] = {pipeline: {key.split("/")[2]: value for key, value in arrays.items()
                                    if key.startswith(f"{photo}/{pipeline}/")} for pipeline in PIPELINES}
    return KnownAnswers(images, stages, meta.get("server", ""), meta.get("pipeline_arguments", {}))
