"""The recognizer's preprocessing as a DALI graph: one sample per word.

Each sample carries the image's encoded bytes and its word's geometry, which the ocr model
computes with the reference's own arithmetic (:func:`harness.ocr.recognition.crop_geometry`,
:func:`harness.ocr.recognition.input_width`): ``MATRIX`` (3x3, the image's pixels to the
crop's, the quarter turn of a tall crop folded in), ``SIZE`` (the crop's height and width) and
``WIDTHS`` (the resized crop's width and the padded input's). The graph decodes the image,
warps the box upright (``experimental.warp_perspective``: bicubic, border replicated, pixel
centres at integers as OpenCV's), orders the channels, resizes to the spec's height (linear,
no antialias: ``cv2.resize``), normalizes to CHW float and pads the width with the spec's
``pad_value``. Outputs ``CROP`` (the crop, RGB) and ``INPUT`` (the recognizer's input).

The decoder is ``mixed`` (nvJPEG) in the DALI backend; the cpu profile runs the same graph
with the CPU decoder in the Python backend (:class:`CpuRecognitionRunner`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.ocr.recognition import Recognition

INPUTS = ("IMAGE", "MATRIX", "SIZE", "WIDTHS")
OUTPUTS = ("CROP", "INPUT")


def recognition_graph(p: Recognition, decode_spec, decoder: str = "mixed"):
    """The graph's outputs (CROP, INPUT), to be called inside a ``pipeline_def``; the image decoded
    as the detector's DALI graph decodes it (``decode_spec``: the spec's ``[decode]``, EXIF
    orientation included: :func:`harness.preprocessing.dali_graph.decode`)."""
    from nvidia.dali import fn, types

    from harness.preprocessing.dali_graph import decode

    data = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
    matrix = fn.external_source(name="MATRIX", dtype=types.FLOAT, ndim=2)
    size = fn.external_source(name="SIZE", dtype=types.FLOAT, ndim=1)
    widths = fn.external_source(name="WIDTHS", dtype=types.FLOAT, ndim=1)
    image = decode(data, decode_spec, decoder)
    crop = fn.experimental.warp_perspective(image, matrix=matrix, size=size, inverse_map=False, border_mode="replicate",
                                            interp_type=types.INTERP_CUBIC, pixel_origin="center")
    ordered = crop if p.channel_order == "RGB" else fn.color_space_conversion(crop, image_type=types.RGB,
                                                                               output_type=types.BGR)
    resized = fn.resize(ordered, resize_x=widths[0], resize_y=float(p.height), interp_type=types.INTERP_LINEAR,
                        antialias=False)
    scale = 255.0 / p.pixel_range
    normalized = fn.crop_mirror_normalize(resized, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[m * scale for m in p.mean], std=[s * scale for s in p.std])
    padded = fn.pad(normalized, axis_names="W", shape=fn.cast(widths[1:2], dtype=types.INT32), fill_value=p.pad_value)
    return crop, padded


def recognition_pipeline(p: Recognition, decode_spec, batch_size: int, num_threads: int, device_id,
                         decoder: str = "mixed"):
    """A DALI pipeline of :func:`recognition_graph` (not built); one batch in flight (fed, then
    run: a failed batch leaves it usable, as :class:`harness.preprocessing.dali_graph.CpuPipelineRunner`)."""
    from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, prefetch_queue_depth=1)
    def recognition():
        return recognition_graph(p, decode_spec, decoder)

    return recognition()


def served_pipeline(dali_file: str):
    """The ``pipeline_def`` ``<model>/1/dali.py`` hands to ``@autoserialize`` (``mixed`` decoder),
    with the ``[recognition]`` of the spec its config names; the DALI backend sets batch size,
    threads and device from the config (as :func:`harness.preprocessing.dali_graph.production_pipeline`)."""
    from nvidia.dali import pipeline_def

    from harness.ocr.recognition import parameters
    from harness.preprocessing.dali_graph import model_spec_name
    from harness.spec import load_spec

    model_dir = Path(dali_file).resolve().parents[1]
    spec = load_spec(model_dir.parent / model_spec_name(model_dir))
    p = parameters(spec.recognition)

    @pipeline_def(batch_size=1, num_threads=1, device_id=0)
    def recognition():
        return recognition_graph(p, spec.preprocess.decode, "mixed")

    return recognition


def word_samples(data: bytes, quads: np.ndarray, p: Recognition, image_size: tuple[int, int]) -> dict[str, list]:
    """The graph's inputs for each box of one image (``image_size``: its decoded height and width)."""
    from harness.ocr.recognition import crop_geometry, input_width

    out = {name: [] for name in INPUTS}
    encoded = np.frombuffer(data, np.uint8)
    for quad in quads:
        matrix, (height, width) = crop_geometry(quad, p, image_size)
        out["IMAGE"].append(encoded)
        out["MATRIX"].append(matrix.astype(np.float32))
        out["SIZE"].append(np.array([height, width], np.float32))
        out["WIDTHS"].append(np.array(input_width(height, width, p), np.float32))
    return out


def check_sample(image: np.ndarray, matrix: np.ndarray, size: np.ndarray, widths: np.ndarray, p: Recognition) -> None:
    """ValueError (:class:`harness.preprocessing.image_check.ImageError` for the image) unless one
    word's sample is one the ocr model could have sent: an image the image guard lets through, a
    finite 3x3 warp, a crop no longer than the image's diagonal and widths within the
    recognizer's profile (the resized crop's at least 1 and at most the input's, the input's at
    most ``max_width``). Whoever calls the model directly can then cost it no more
    than a word of the ocr model does."""
    from harness.preprocessing.image_check import inspect

    header = inspect(image)
    matrix, size, widths = (np.asarray(a, np.float64) for a in (matrix, size, widths))
    if matrix.shape != (3, 3) or not np.isfinite(matrix).all():
        raise ValueError(f"MATRIX must be a finite 3x3 warp, got {matrix.tolist()}")
    diagonal = math.hypot(header.width, header.height) + 1
    if size.shape != (2,) or not np.isfinite(size).all() or not ((size >= 1) & (size <= diagonal)).all():
        raise ValueError(f"SIZE must be the crop's (height, width), each from 1 to the {header.width}x{header.height} "
                         f"image's diagonal ({diagonal:.0f}), got {size.tolist()}")
    if widths.shape != (2,) or not np.isfinite(widths).all() or not 1 <= widths[0] <= widths[1] <= p.max_width:
        raise ValueError(f"WIDTHS must be (the resized crop's, the input's) with 1 <= resized <= input <= "
                         f"{p.max_width} (the recognizer's profile), got {widths.tolist()}")


class CpuRecognitionRunner:
    """The graph with DALI's CPU decoder, built once, run on a batch of word samples."""

    def __init__(self, p: Recognition, decode_spec, batch_size: int, num_threads: int = 1):
        self.batch_size = batch_size
        self.pipeline = recognition_pipeline(p, decode_spec, batch_size, num_threads, None, decoder="cpu")
        self.pipeline.build()

    def run(self, samples: dict[str, list]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(crop, input) of each sample, ``batch_size`` at a time."""
        total = len(samples["IMAGE"])
        out = []
        for start in range(0, total, self.batch_size):
            for name in INPUTS:
                self.pipeline.feed_input(name, samples[name][start:start + self.batch_size])
            crops, inputs = self.pipeline.run()
            out += [(np.array(crops[i]), np.array(inputs[i])) for i in range(len(crops))]
        return out
