"""The recognizer's preprocessing as a DALI graph: one sample per word.

Each sample carries its word's region of the decoded image and its geometry, which the ocr
model computes with the reference's own arithmetic (:func:`harness.operations.word_crop.crop_geometry`,
:func:`harness.ocr.recognition.input_width`): ``IMAGE`` (HWC uint8 RGB: the box's bounding
rectangle with :data:`REGION_MARGIN` pixels around it, within the image), ``MATRIX`` (3x3, the
region's pixels to the crop's, the quarter turn of a tall crop folded in), ``SIZE`` (the crop's
height and width) and ``WIDTHS`` (the resized crop's width and the padded input's). The image
is decoded once per request, by the DALI decode of the detector's preprocessing (its taps
model's ``DECODED``): a region, not the whole image, travels with each word (a 1,000-word page
cost 1,000 decodes of the whole file before). The graph warps the box upright
(the word crop's DALI kernel, :func:`harness.operations.word_crop.warp`: the region holds
every pixel the warp reads, so the crop is the whole image's),
orders the channels, resizes to the spec's height (``cv2.resize``'s own filter, by the resize
filter's DALI kernel),
normalizes to CHW float and pads the width with the spec's ``pad_value``. Outputs ``CROP`` (the
crop, RGB) and ``INPUT`` (the recognizer's input). Whatever a caller sends, the crop is no
larger than its region's diagonal and the widths stay within the recognizer's profile
(:func:`check_sample` refuses such a word in the cpu profile; the graph clamps it in the DALI
backend, which cannot refuse one sample).

The graph runs on the GPU in the DALI backend; the cpu profile runs the same graph on the CPU in
the Python backend (:class:`CpuRecognitionRunner`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.ocr.recognition import Recognition
from harness.operations import channels, resize_filter, word_crop

INPUTS = ("IMAGE", "MATRIX", "SIZE", "WIDTHS")
OUTPUTS = ("CROP", "INPUT")
REGION_MARGIN = 3
"""Pixels around a box's bounding rectangle in its region: the bicubic warp reads two around
each point it samples."""


def recognition_graph(p: Recognition, device: str = "gpu"):
    """The graph's outputs (CROP, INPUT), to be called inside a ``pipeline_def``; ``device``: where
    the warp and what follows run ("gpu" in the DALI backend, "cpu" here)."""
    from nvidia.dali import fn, types
    from nvidia.dali import math as dmath

    region = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=3, layout="HWC")
    matrix = fn.external_source(name="MATRIX", dtype=types.FLOAT, ndim=2)
    size = fn.external_source(name="SIZE", dtype=types.FLOAT, ndim=1)
    widths = fn.external_source(name="WIDTHS", dtype=types.FLOAT, ndim=1)
    shape = region.shape(dtype=types.FLOAT)
    size = dmath.clamp(size, 1.0, dmath.sqrt(shape[0] * shape[0] + shape[1] * shape[1]) + 1.0)
    widths = dmath.clamp(widths, 1.0, float(p.max_width))
    image = region.gpu() if device == "gpu" else region
    crop = word_crop.warp(image, matrix, size)
    ordered = channels.dali_hwc(crop, p)
    resized = resize_filter.OPERATION.kernels["dali"](ordered, dict(resize_x=widths[0], resize_y=float(p.height)),
                                                      resize_filter.CV2_DEFAULT)
    scale = 255.0 / p.pixel_range
    normalized = fn.crop_mirror_normalize(resized, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[m * scale for m in p.mean], std=[s * scale for s in p.std])
    padded = fn.pad(normalized, axis_names="W", shape=fn.cast(widths[1:2], dtype=types.INT32), fill_value=p.pad_value)
    return crop, padded


def recognition_pipeline(p: Recognition, batch_size: int, num_threads: int, device_id, device: str = "gpu"):
    """A DALI pipeline of :func:`recognition_graph` (not built); one batch in flight (fed, then
    run: a failed batch leaves it usable, as :class:`harness.preprocessing.dali_graph.CpuPipelineRunner`)."""
    from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, prefetch_queue_depth=1)
    def recognition():
        return recognition_graph(p, device)

    return recognition()


def served_pipeline(dali_file: str):
    """The ``pipeline_def`` ``<model>/1/dali.py`` hands to ``@autoserialize`` (on the GPU), with
    the ``[recognition]`` of the spec its config names; the DALI backend sets batch size, threads
    and device from the config (as :func:`harness.preprocessing.dali_graph.production_pipeline`)."""
    from nvidia.dali import pipeline_def

    from harness.ocr.recognition import parameters
    from harness.preprocessing.dali_graph import model_spec_name
    from harness.spec import load_spec

    model_dir = Path(dali_file).resolve().parents[1]
    spec = load_spec(model_dir.parent / model_spec_name(model_dir))
    p = parameters(spec.recognition)

    @pipeline_def(batch_size=1, num_threads=1, device_id=0)
    def recognition():
        return recognition_graph(p, "gpu")

    return recognition


def word_samples(image: np.ndarray, quads: np.ndarray, p: Recognition) -> dict[str, list]:
    """The graph's inputs for each box of one decoded image (HWC uint8 RGB): its region and the
    warp from the region's pixels (the whole image's warp, moved by the region's corner)."""
    from harness.ocr.recognition import input_widths

    out = {name: [] for name in INPUTS}
    height_px, width_px = image.shape[:2]
    geometries = [word_crop.crop_geometry(quad, p, (height_px, width_px)) for quad in quads]
    widths = input_widths([size for _, size in geometries], p)  # each padded to the widest of its batch
    for quad, (matrix, (height, width)), word_widths in zip(quads, geometries, widths):
        points = np.asarray(quad, np.float64).reshape(4, 2)
        x0, y0 = (max(0, min(int(math.floor(v)) - REGION_MARGIN, limit - 1))
                  for v, limit in zip(points.min(axis=0), (width_px, height_px)))
        x1, y1 = (max(start + 1, min(int(math.ceil(v)) + REGION_MARGIN + 1, limit))
                  for v, start, limit in zip(points.max(axis=0), (x0, y0), (width_px, height_px)))
        moved = matrix.astype(np.float64) @ np.array([[1, 0, x0], [0, 1, y0], [0, 0, 1]], np.float64)
        out["IMAGE"].append(np.ascontiguousarray(image[y0:y1, x0:x1]))
        out["MATRIX"].append(moved.astype(np.float32))
        out["SIZE"].append(np.array([height, width], np.float32))
        out["WIDTHS"].append(np.array(word_widths, np.float32))
    return out


def check_sample(region: np.ndarray, matrix: np.ndarray, size: np.ndarray, widths: np.ndarray, p: Recognition) -> None:
    """ValueError unless one word's sample is one the ocr model could have sent: a region of at
    most :data:`harness.MAX_IMAGE_PIXELS` pixels of 3 channels, a finite 3x3 warp, a crop no
    longer than the region's diagonal and widths within the recognizer's profile (the resized
    crop's at least 1 and at most the input's, the input's at most ``max_width``). Whoever calls
    the model directly can then cost it no more than a word of the ocr model does."""
    from harness import MAX_IMAGE_PIXELS

    region = np.asarray(region)
    if region.ndim != 3 or region.shape[2] != 3 or 0 in region.shape or region.shape[0] * region.shape[1] > MAX_IMAGE_PIXELS:
        raise ValueError(f"IMAGE must be the word's region of the decoded image, [height, width, 3] of at most "
                         f"{MAX_IMAGE_PIXELS} pixels, got {list(region.shape)}")
    matrix, size, widths = (np.asarray(a, np.float64) for a in (matrix, size, widths))
    if matrix.shape != (3, 3) or not np.isfinite(matrix).all():
        raise ValueError(f"MATRIX must be a finite 3x3 warp, got {matrix.tolist()}")
    diagonal = math.hypot(*region.shape[:2]) + 1
    if size.shape != (2,) or not np.isfinite(size).all() or not ((size >= 1) & (size <= diagonal)).all():
        raise ValueError(f"SIZE must be the crop's (height, width), each from 1 to the {region.shape[1]}x"
                         f"{region.shape[0]} region's diagonal ({diagonal:.0f}), got {size.tolist()}")
    if widths.shape != (2,) or not np.isfinite(widths).all() or not 1 <= widths[0] <= widths[1] <= p.max_width:
        raise ValueError(f"WIDTHS must be (the resized crop's, the input's) with 1 <= resized <= input <= "
                         f"{p.max_width} (the recognizer's profile), got {widths.tolist()}")


class CpuRecognitionRunner:
    """The graph on the CPU, built once, run on a batch of word samples."""

    def __init__(self, p: Recognition, batch_size: int, num_threads: int = 1):
        self.batch_size = batch_size
        self.pipeline = recognition_pipeline(p, batch_size, num_threads, None, device="cpu")
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
