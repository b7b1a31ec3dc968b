"""Known answers: what a deployment serves for a few photos, recorded.

``harness preflight --record`` keeps, for each known-answer photo, the file bytes, every
preprocessing stage of both pipelines (the taps models) and the logits of both ensembles,
plus the DALI operator arguments the pipeline uses and the versions it was recorded with.
Two records: the cpu profile's (``make setup`` records it from the embedded server, in
``build/preflight``, reading the photos from ``data/photos``), and a GPU host's own
(``--record`` there, in ``build/preflight/gpu``: :func:`record_dir`), made from the very
bytes the cpu record holds, so that both records answer for the same files (the Triton
image has no ``data/photos``). ``harness preflight`` compares a server with its own
profile's record by the drift rule, and a GPU host's answers with the cpu record by the
decoder rule (:mod:`harness.compare.tolerance`).

Each task's served result that it declares (:attr:`harness.task_api.Task.known_results`: a
detector's boxes, a segmenter's masks) is kept too, where the server serves its ensembles: the
answers of its photos, which ``harness preflight --task NAME`` holds a server's to by the task's
own check (:meth:`harness.task_api.Task.check_known_results`). Preflight names no task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.client import IMAGE, PIPELINES, TritonClient
from harness.files import strict_json, write_atomic
from harness.packing import pack_images
from harness.task import TASKS
from harness.task_api import KnownResults

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
    profile: str = "cpu"
    """The profile of the server they were recorded from (``cpu`` or ``gpu``)."""
    versions: dict[str, str] = field(default_factory=dict)
    """What recorded them: the server, and the DALI, nvImageCodec and nvJPEG of the recording
    process (the server's own when recorded in its image or, for the cpu profile, its virtualenv)."""
    result_images: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """The photos of each task's known results, by photo name, under :attr:`KnownResults.name`."""
    results: dict[str, dict[str, dict[str, dict[str, np.ndarray]]]] = field(default_factory=dict)
    """``results[name][photo][pipeline][output]`` of each task's :class:`KnownResults` ``name``
    (``detection``: :attr:`KnownResults.outputs` of ``detect_<pipeline>``); without ``name`` in a
    record of a server that did not serve them (or made before they were recorded)."""

    @property
    def source(self) -> str:
        """The record in words, for the table: ``gpu record (server 2.70.0, nvJPEG 13.3.2)``."""
        found = ", ".join(f"{k} {v}" for k, v in self.versions.items() if v)
        return f"{self.profile} record" + (f" ({found})" if found else "")


def record_dir(directory: Path, profile: str) -> Path:
    """Where a profile's record lives: the cpu profile's in ``directory`` itself (``make
    setup`` writes it there), any other profile's in a folder of its name beside it."""
    return Path(directory) if profile == "cpu" else Path(directory) / profile


def read_photos(directory: Path, names: tuple[str, ...] = PHOTOS) -> dict[str, bytes]:
    """The bytes of the known-answer :data:`PHOTOS` (or ``names``) in ``directory``
    (``data/photos``); FileNotFoundError names the missing ones."""
    paths = [Path(directory) / name for name in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"known-answer photos missing: {', '.join(missing)} (make setup gathers them)")
    return {p.name: p.read_bytes() for p in paths}


def declared() -> list[KnownResults]:
    """The known results the registered tasks declare, each once (the OCR task's deployment
    answers the detection task's), in registration order. Imports every task."""
    found: dict[str, KnownResults] = {}
    for task in TASKS.values():
        if task.known_results is not None:
            found.setdefault(task.known_results.name, task.known_results)
    return list(found.values())


def answer(client: TritonClient, known: KnownResults, data: bytes, pipeline: str) -> dict[str, np.ndarray]:
    """One photo's :attr:`KnownResults.outputs` from its ensemble of ``pipeline``, batch axis removed."""
    out = client.infer(known.ensemble(pipeline), {IMAGE: pack_images([data])}, list(known.outputs))
    return {name: value[0] for name, value in out.items()}


def serves(client: TritonClient, known: KnownResults) -> bool:
    """Whether the server has every pipeline's ensemble of ``known`` ready."""
    return all(client.is_ready(known.ensemble(p)) for p in PIPELINES)


def record(client: TritonClient, images: dict[str, bytes], out: Path, pipeline_arguments: dict[str, list[str]],
           profile: str = "cpu", versions: dict[str, str | None] | None = None,
           result_images: dict[str, dict[str, bytes]] | None = None) -> Path:
    """Read the known answers of ``images`` (name -> file bytes) from a running server of
    ``profile`` into ``out``; ``versions`` (e.g. the decode stack this process loaded) are
    kept with them; ``result_images``: :attr:`KnownResults.name` -> the photos whose answers
    that task's ensembles give (:func:`declared`)."""
    arrays, names = {}, []
    for name, data in images.items():
        names.append(name)
        arrays[f"{name}/image"] = np.frombuffer(data, np.uint8)
        for pipeline in PIPELINES:
            for stage, tensor in client.deployed(data, pipeline).items():
                arrays[f"{name}/{pipeline}/{stage}"] = tensor
    by_name = {known.name: known for known in declared()}
    for result, photos in (result_images or {}).items():
        known = by_name[result]
        for name, data in photos.items():
            arrays[f"{known.prefix}:{name}/image"] = np.frombuffer(data, np.uint8)
            for pipeline in PIPELINES:
                for output, tensor in answer(client, known, data, pipeline).items():
                    arrays[f"{known.prefix}:{name}/{pipeline}/{output}"] = tensor
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / ARRAYS, **arrays)
    server = client.server_metadata().get("version", "")
    meta = {"photos": names, "server": server, "pipeline_arguments": pipeline_arguments, "profile": profile,
            "versions": {"server": server, **{k: v for k, v in (versions or {}).items() if v}},
            **{f"{known.name}_photos": list((result_images or {}).get(known.name, {})) for known in declared()}}
    write_atomic(out / META, strict_json(meta, indent=2) + "\n")  # written last: marks the record complete
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
    result_images, results = {}, {}
    for known in declared():
        photos = meta.get(f"{known.name}_photos", [])
        if photos:
            result_images[known.name] = {p: arrays[f"{known.prefix}:{p}/image"].tobytes() for p in photos}
            results[known.name] = {p: {pipeline: {o: arrays[f"{known.prefix}:{p}/{pipeline}/{o}"] for o in known.outputs}
                                       for pipeline in PIPELINES} for p in photos}
    return KnownAnswers(images, stages, meta.get("server", ""), meta.get("pipeline_arguments", {}),
                        meta.get("profile", "cpu"), meta.get("versions", {}), result_images, results)
