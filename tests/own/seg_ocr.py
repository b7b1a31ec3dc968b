"""Segmentation and OCR deployments of the tests' own making, in the shapes users serve rembg
and rapidocr (none of this project's names, no harness code inside the models), each aligned
and planted, all in one repository served by one embedded tritonserver:

- ``remove_background`` (ensemble, one image a request): ``matte_prep`` (rembg's preprocessing
  -> ``tensor`` float32 [1, 3, 320, 320]), ``u2netp`` (U²-Net-p in ONNX Runtime under the file's
  names: ``input.1`` -> ``1959`` [1, 1, 320, 320]), ``rembg_post`` (the map and the photo's
  bytes -> ``alpha`` uint8 [H, W] at the photo's size: what rembg answers);
- ``remove_background_nchw``: the same steps, its last (``rembg_post_nchw``) answering ``alpha``
  float32 0 to 1 [1, 1, H, W]: the map's NCHW layout with the batch axis of one a step without
  batching keeps (issue 59: it was read as the raw map, every image "with another shape");
- ``matte_320``: one model answering ``matte`` float32 [320, 320] (0 to 1) at the model's size;
- ``read_text``: rapidocr whole (``image_bytes`` -> ``boxes`` [-1, 4, 2], ``scores``, ``texts``);
- ``read_words``: rapidocr whole answering ``regions`` [-1, 4] as x, y, width, height,
  ``confidence`` and ``words``.

Each has a ``_planted`` twin: the mattes' preprocessing a hand port's (OpenCV linear resize,
``/ 255``: ``matting/rembg_prep.py``), the readers' recognizer preprocessing a hand port's
(crops resized with ``INTER_AREA``, ImageNet normalization: ``reading/model.py``). The
readers' detector runs at a CI-sized limit side (``specs/ocr/small.toml``: the longer side 320)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from harness.paths import PROJECT_ROOT
from harness.server import TritonServer, free_port

HERE = Path(__file__).resolve().parent
MATTING, READING = HERE / "matting", HERE / "reading"
SEGMENTATION_SPEC = PROJECT_ROOT / "model_repository" / "segmentation.toml"
"""rembg's own preprocessing and postprocessing: the training the mattes are checked against."""
OCR_SPEC = PROJECT_ROOT / "specs" / "ocr" / "small.toml"
"""rapidocr's detector and recognizer settings, the detector at the limit side the readers use."""
MATTE_ENSEMBLE, MATTE_MODEL, TEXT_MODEL, WORDS_MODEL = "remove_background", "matte_320", "read_text", "read_words"
NCHW_MATTE_ENSEMBLE = "remove_background_nchw"
PLANTED = "_planted"

_BYTES_IN = 'input [ { name: "image" data_type: TYPE_STRING dims: [ 1 ] } ]'
_CONFIGS = {
    "matte_prep": (MATTING / "prep.py", f'''{_BYTES_IN}
output [ {{ name: "tensor" data_type: TYPE_FP32 dims: [ 1, 3, 320, 320 ] }} ]'''),
    "u2netp": (MATTING / "net.py", '''input [ { name: "input.1" data_type: TYPE_FP32 dims: [ 1, 3, 320, 320 ] } ]
output [ { name: "1959" data_type: TYPE_FP32 dims: [ 1, 1, 320, 320 ] } ]'''),
    "rembg_post": (MATTING / "post.py", '''input [ { name: "pred" data_type: TYPE_FP32 dims: [ 1, 1, 320, 320 ] },
        { name: "image" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "alpha" data_type: TYPE_UINT8 dims: [ -1, -1 ] } ]'''),
    "rembg_post_nchw": (MATTING / "post.py", '''input [ { name: "pred" data_type: TYPE_FP32 dims: [ 1, 1, 320, 320 ] },
        { name: "image" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "alpha" data_type: TYPE_FP32 dims: [ 1, 1, -1, -1 ] } ]'''),
    MATTE_MODEL: (MATTING / "whole.py", f'''{_BYTES_IN}
output [ {{ name: "matte" data_type: TYPE_FP32 dims: [ 320, 320 ] }} ]'''),
    TEXT_MODEL: (READING / "model.py", '''input [ { name: "image_bytes" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ -1, 4, 2 ] },
         { name: "scores" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "texts" data_type: TYPE_STRING dims: [ -1 ] } ]'''),
    WORDS_MODEL: (READING / "model.py", '''input [ { name: "image_bytes" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "regions" data_type: TYPE_FP32 dims: [ -1, 4 ] },
         { name: "confidence" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "words" data_type: TYPE_STRING dims: [ -1 ] } ]'''),
}
_ENSEMBLE = '''platform: "ensemble"
max_batch_size: 0
input [ { name: "image" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "alpha" data_type: TYPE_UINT8 dims: [ -1, -1 ] } ]
ensemble_scheduling { step [
  { model_name: "PREP" model_version: -1 input_map { key: "image" value: "image" }
    output_map { key: "tensor" value: "normalized" } },
  { model_name: "u2netp" model_version: -1 input_map { key: "input.1" value: "normalized" }
    output_map { key: "1959" value: "saliency" } },
  { model_name: "POST" model_version: -1 input_map [ { key: "pred" value: "saliency" },
    { key: "image" value: "image" } ] output_map { key: "alpha" value: "alpha" } } ] }
'''
SEGMENTATION_MODELS = [MATTE_ENSEMBLE, MATTE_ENSEMBLE + PLANTED, NCHW_MATTE_ENSEMBLE, MATTE_MODEL, MATTE_MODEL + PLANTED]
OCR_MODELS = [TEXT_MODEL, TEXT_MODEL + PLANTED, WORDS_MODEL, WORDS_MODEL + PLANTED]


def _model(out: Path, name: str, role: str, parameters: dict[str, str]) -> None:
    source, signature = _CONFIGS[role]
    (out / name / "1").mkdir(parents=True)
    shutil.copy(source, out / name / "1" / "model.py")
    if source.parent == MATTING:
        shutil.copy(MATTING / "rembg_prep.py", out / name / "1" / "rembg_prep.py")
    (out / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{signature}\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
        + "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()))


def write_repository(out: Path, segmenter: Path) -> Path:
    """Every model of the module's docstring in ``out``; ``segmenter``: U²-Net-p's ONNX."""
    onnx = {"onnx_path": str(Path(segmenter).resolve())}
    reader = {"limit_side_len": "320", "limit_type": "max"}
    _model(out, "u2netp", "u2netp", onnx)
    _model(out, "rembg_post", "rembg_post", {})
    _model(out, "rembg_post_nchw", "rembg_post_nchw", {"layout": "nchw"})
    for name, prep, post in ((MATTE_ENSEMBLE, "matte_prep", "rembg_post"),
                             (MATTE_ENSEMBLE + PLANTED, "matte_prep" + PLANTED, "rembg_post"),
                             (NCHW_MATTE_ENSEMBLE, "matte_prep", "rembg_post_nchw")):
        config = _ENSEMBLE.replace("PREP", prep).replace("POST", post)
        if post == "rembg_post_nchw":
            config = config.replace("TYPE_UINT8 dims: [ -1, -1 ]", "TYPE_FP32 dims: [ 1, 1, -1, -1 ]")
        (out / name / "1").mkdir(parents=True)
        (out / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    for suffix, mode in (("", "aligned"), (PLANTED, "planted")):
        _model(out, "matte_prep" + suffix, "matte_prep", {"mode": mode})
        _model(out, MATTE_MODEL + suffix, MATTE_MODEL, {"mode": mode, **onnx})
        _model(out, TEXT_MODEL + suffix, TEXT_MODEL, {"mode": mode, "boxes": "quads", **reader})
        _model(out, WORDS_MODEL + suffix, WORDS_MODEL, {"mode": mode, "boxes": "xywh", **reader})
    return out


@contextlib.contextmanager
def serve(out: Path, segmenter: Path) -> Iterator[TritonServer]:
    """:func:`write_repository` served for the block; stopped by its PID, checked exited."""
    repository = write_repository(out, segmenter)
    server = TritonServer(repository, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                          log_file=out.parent / f"{out.name}.log")
    with server:
        yield server
    assert not server.is_running(), "tritonserver did not exit"
