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

Where the server serves the text detector (``detect_dali``, ``detect_opencv``), the record
also keeps, for each photo of :data:`DETECTION_PHOTOS`, the boxes, scores and geometry both
detection ensembles answer; ``harness preflight --task detection`` compares a server's with
them by :func:`harness.detection.compare.compare_detections`. Where it serves the segmenter
(``segment_*``), likewise the matte, mask and geometry of :data:`SEGMENTATION_PHOTOS`, which
``harness preflight --task segmentation`` compares by :func:`harness.segmentation.compare.compare_masks`.
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

ARRAYS = "known_answers.npz"
META = "known_answers.json"
PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "grace_hopper.jpg")
"""Known-answer photos of the corpus (data/photos): animals, food, a person; varied sizes."""
DETECTION_PHOTOS = ("grace_hopper.jpg", "LinuxLogo.jpg")
"""Known-answer photos with text (data/photos): the badge and ribbons of the portrait, the
logo's lettering. The reference detector finds 4 and 3 words in them, every score at least
0.15 above the threshold (0.5), so no box is a near-threshold one that may come and go."""
DETECTION_OUTPUTS = ("BOXES", "SCORES", "GEOMETRY")
"""What the record keeps of a detection ensemble's answer (the map is megabytes a photo)."""
_DETECT = "detect:"
"""Prefix of the detection answers' keys in the record's arrays."""
SEGMENTATION_PHOTOS = ("squirrel_cls.jpg", "grace_hopper.jpg")
"""Known-answer photos with a salient subject (data/photos): the squirrel, the portrait."""
SEGMENTATION_OUTPUTS = ("MATTE", "MASK", "GEOMETRY")
"""What the record keeps of a segmentation ensemble's answer."""
_SEGMENT = "segment:"
"""Prefix of the segmentation answers' keys in the record's arrays."""


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
    detection_images: dict[str, bytes] = field(default_factory=dict)
    """The photos of the detection answers, by name (:data:`DETECTION_PHOTOS`)."""
    detections: dict[str, dict[str, dict[str, np.ndarray]]] = field(default_factory=dict)
    """``detections[photo][pipeline][output]`` (:data:`DETECTION_OUTPUTS`) of ``detect_<pipeline>``;
    empty in a record of a server without the detector (or made before it was served)."""
    segmentation_images: dict[str, bytes] = field(default_factory=dict)
    """The photos of the segmentation answers, by name (:data:`SEGMENTATION_PHOTOS`)."""
    segmentations: dict[str, dict[str, dict[str, np.ndarray]]] = field(default_factory=dict)
    """``segmentations[photo][pipeline][output]`` (:data:`SEGMENTATION_OUTPUTS`) of ``segment_<pipeline>``;
    empty in a record of a server without the segmenter."""

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


def box_models():
    """This repository's models whose ensembles answer boxes: those of the task whose result its
    server computes (:attr:`harness.client.TaskModels.results`: the detector's); None: none."""
    return next((t.repository for t in TASKS.values() if t.repository is not None and t.repository.results), None)


def detect(client: TritonClient, data: bytes, pipeline: str) -> dict[str, np.ndarray]:
    """One photo's :data:`DETECTION_OUTPUTS` from the box models' ensemble of ``pipeline``
    (``detect_<pipeline>``), batch axis removed."""
    ensemble = box_models().ensemble(pipeline)
    out = client.infer(ensemble, {IMAGE: pack_images([data])}, list(DETECTION_OUTPUTS))
    return {name: value[0] for name, value in out.items()}


def serves_detection(client: TritonClient) -> bool:
    """Whether the server has both detection ensembles ready."""
    models = box_models()
    return models is not None and all(client.is_ready(models.ensemble(p)) for p in PIPELINES)


def mask_models():
    """This repository's segmentation models (``segment_*``)."""
    return TASKS["segmentation"].repository


def segment(client: TritonClient, data: bytes, pipeline: str) -> dict[str, np.ndarray]:
    """One photo's :data:`SEGMENTATION_OUTPUTS` from ``segment_<pipeline>``, batch axis removed."""
    out = client.infer(mask_models().ensemble(pipeline), {IMAGE: pack_images([data])}, list(SEGMENTATION_OUTPUTS))
    return {name: value[0] for name, value in out.items()}


def serves_segmentation(client: TritonClient) -> bool:
    """Whether the server has both segmentation ensembles ready."""
    return all(client.is_ready(mask_models().ensemble(p)) for p in PIPELINES)


def record(client: TritonClient, images: dict[str, bytes], out: Path, pipeline_arguments: dict[str, list[str]],
           profile: str = "cpu", versions: dict[str, str | None] | None = None,
           detection_images: dict[str, bytes] | None = None,
           segmentation_images: dict[str, bytes] | None = None) -> Path:
    """Read the known answers of ``images`` (name -> file bytes) from a running server of
    ``profile`` into ``out``; ``versions`` (e.g. the decode stack this process loaded) are
    kept with them; ``detection_images``: photos whose boxes both detection ensembles answer."""
    arrays, names = {}, []
    for name, data in images.items():
        names.append(name)
        arrays[f"{name}/image"] = np.frombuffer(data, np.uint8)
        for pipeline in PIPELINES:
            for stage, tensor in client.deployed(data, pipeline).items():
                arrays[f"{name}/{pipeline}/{stage}"] = tensor
    for name, data in (detection_images or {}).items():
        arrays[f"{_DETECT}{name}/image"] = np.frombuffer(data, np.uint8)
        for pipeline in PIPELINES:
            for output, tensor in detect(client, data, pipeline).items():
                arrays[f"{_DETECT}{name}/{pipeline}/{output}"] = tensor
    for name, data in (segmentation_images or {}).items():
        arrays[f"{_SEGMENT}{name}/image"] = np.frombuffer(data, np.uint8)
        for pipeline in PIPELINES:
            for output, tensor in segment(client, data, pipeline).items():
                arrays[f"{_SEGMENT}{name}/{pipeline}/{output}"] = tensor
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / ARRAYS, **arrays)
    server = client.server_metadata().get("version", "")
    meta = {"photos": names, "server": server, "pipeline_arguments": pipeline_arguments, "profile": profile,
            "versions": {"server": server, **{k: v for k, v in (versions or {}).items() if v}},
            "detection_photos": list(detection_images or {}), "segmentation_photos": list(segmentation_images or {})}
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
    detection_images, detections = {}, {}
    for photo in meta.get("detection_photos", []):
        detection_images[photo] = arrays[f"{_DETECT}{photo}/image"].tobytes()
        detections[photo] = {pipeline: {name: arrays[f"{_DETECT}{photo}/{pipeline}/{name}"] for name in DETECTION_OUTPUTS}
                             for pipeline in PIPELINES}
    segmentation_images, segmentations = {}, {}
    for photo in meta.get("segmentation_photos", []):
        segmentation_images[photo] = arrays[f"{_SEGMENT}{photo}/image"].tobytes()
        segmentations[photo] = {pipeline: {name: arrays[f"{_SEGMENT}{photo}/{pipeline}/{name}"]
                                           for name in SEGMENTATION_OUTPUTS} for pipeline in PIPELINES}
    return KnownAnswers(images, stages, meta.get("server", ""), meta.get("pipeline_arguments", {}),
                        meta.get("profile", "cpu"), meta.get("versions", {}), detection_images, detections,
                        segmentation_images, segmentations)
