"""The preprocessing operations' registry (harness/operations/): one module per operation,
which every backend, the spec and diagnose read. No server."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness import operations, postprocessing
from harness.operations.base import Alternative, Key, Operation
from harness.paths import DEFAULT_PHOTOS as PHOTOS_DIR
from harness.preprocessing import opencv
from harness.reference import BUILT_IN
from harness.spec import Preprocess, SpecError, parse_spec, with_overrides
from harness.stage import Stage

ROOT = Path(__file__).resolve().parents[1]
MIGRATED = ("channel_order", "divide_by", "\"lanczos\"", "\"stretch\"", "pad_position", "limit_type", "antialias",
            "offset_rounding", "exif_orientation", "fancy_upsampling", "fast_idct",
            # the postprocessings' keys (their records in harness/postprocessing.py, with diagnose's values tried)
            "box_thresh", "conf_threshold", "score_threshold")
"""Spec keys (and values) whose operation is one module: each named in at most 3 source files."""


@pytest.mark.parametrize("key", MIGRATED)
def test_a_migrated_key_is_named_in_at_most_three_source_files(key):
    named = subprocess.run(["grep", "-rlF", "--include=*.py", "-e", key, "harness", "loadtest"], cwd=ROOT,
                           capture_output=True, text=True, check=False).stdout.split()
    assert len(named) <= 3, f"{key} is named in {len(named)} files: {sorted(named)}"


def test_every_key_with_choices_is_validated_by_the_spec_naming_it():
    for key in operations.keys():
        if not key.choices:
            continue
        table = {key.table: {key.name: "nonsense"}}
        if key.applies is not None:  # a detector's key: checked where a detector's resize uses it
            table["resize"] = {"mode": "letterbox", "size": [640, 640], **table.get("resize", {})}
        with pytest.raises(SpecError, match=rf"{key.path} = 'nonsense'; expected one of"):
            parse_spec(table, "t.toml")


def test_the_spec_defaults_are_the_operations_defaults():
    p = Preprocess()
    for key in operations.keys():
        assert getattr(getattr(p, key.table), key.name) == key.default, key.path


@pytest.fixture
def toy_operation(monkeypatch):
    """An operation registered for the test only: the input plus one, in every backend."""
    monkeypatch.setattr(operations, "OPERATIONS", dict(operations.OPERATIONS))
    op = Operation("plus one", Stage.INPUT, (Key("input", "plus_one", False),), hint="the toy's plus one",
                   alternatives=lambda recipe, ref, deployed: [Alternative("no plus one", "plus one", {})])
    for backend in ("opencv", "torchvision", "torch"):
        op.kernel(backend)(lambda x, p: x + 1)
    return operations.register(op)


def test_a_registered_operation_runs_in_every_backend_step_of_its_stage(toy_operation):
    """The backends loop over the stage's operations: a new one needs no change to their steps."""
    photo = (PHOTOS_DIR / "baboon.jpg").read_bytes()
    p = Preprocess()
    for recipe in ("opencv", "torchvision"):
        with_toy = BUILT_IN[recipe](p)(photo)[Stage.INPUT]
        operations.OPERATIONS.pop("plus one")
        without = BUILT_IN[recipe](p)(photo)[Stage.INPUT]
        operations.register(toy_operation)
        np.testing.assert_allclose(with_toy, without + 1, atol=1e-5, err_msg=recipe)
    assert "the toy's plus one" in operations.hint(Stage.INPUT)


def test_a_backend_without_a_kernel_says_so_by_the_one_rule(toy_operation):
    """No DALI kernel: the DALI graph refuses the spec, and so does diagnose's check of what the
    deployment can take, with one reason."""
    from harness.preprocessing import dali_graph

    reason = operations.refusal("dali", Preprocess())
    assert reason == "dali has no kernel for the plus one"
    with pytest.raises(SpecError, match="dali has no kernel for the plus one"):
        dali_graph.check_supported(Preprocess())
    assert operations.refusal("opencv", Preprocess()) is None
    opencv.check_supported(Preprocess())


def test_a_kernel_that_cannot_do_a_value_refuses_it_for_serving_and_for_diagnose():
    area = with_overrides(Preprocess(), resize={"interpolation": "area"})
    reason = operations.refusal("dali", area)
    assert reason and "no 'area' interpolation" in reason
    from harness.preprocessing import dali_graph

    with pytest.raises(SpecError, match="no 'area' interpolation"):
        dali_graph.check_supported(area)
    with pytest.raises(SpecError, match="no 'area' interpolation"):
        BUILT_IN["torchvision"](area)
    assert operations.refusal("opencv", area) is None


@pytest.mark.parametrize("table", [{"input": {"channel_order": "BGR"}},
                                   {"input": {"channel_order": "BGR"},
                                    "normalize": {"divide_by": "max", "pixel_range": 1.0, "mean": [0.4, 0.5, 0.6],
                                                  "std": [0.2, 0.25, 0.3]}}])
def test_the_input_kernels_of_every_backend_agree(table):
    """The same crop through OpenCV's, torchvision's and DALI's input kernels (normalization, then
    channel order): one operation, three libraries, the same model input."""
    import torch

    p = with_overrides(Preprocess(), **table)
    crop = opencv.decode((PHOTOS_DIR / "fruits.jpg").read_bytes(), p.decode)[:224, :224]
    numpy = np.ascontiguousarray(operations.apply(Stage.INPUT, "opencv", crop, p))
    tensor = torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1))).to(torch.float32)
    torchvision = operations.apply(Stage.INPUT, "torchvision", tensor, p).numpy()
    np.testing.assert_allclose(torchvision, numpy, atol=2e-5)
    np.testing.assert_allclose(_dali_input(crop, p), numpy, atol=2e-5)


def _dali_input(crop: np.ndarray, p: Preprocess) -> np.ndarray:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        image = fn.external_source(name="CROP", device="cpu", dtype=types.UINT8, ndim=3, layout="HWC")
        return operations.apply(Stage.INPUT, "dali", image, p)

    pipe = pipeline()
    pipe.build()
    pipe.feed_input("CROP", [np.ascontiguousarray(crop)])
    (out,) = pipe.run()
    return np.array(out[0])


def test_an_operations_partners_are_tried_together_by_diagnose(monkeypatch):
    """An operation declares its compound alternatives beside its others: diagnose's catalogue
    pairs their hypotheses by them, keeping no list of its own."""
    from harness.diagnose.catalogue import Hypothesis, partnered

    monkeypatch.setattr(operations, "OPERATIONS", dict(operations.OPERATIONS))
    operations.register(Operation("decode switches", Stage.DECODE, (), hint="", partners=(("idct", "upsampling"),)))
    halves = [Hypothesis("fast IDCT", "idct", {"decode": {"fast_idct": True}}),
              Hypothesis("no fancy upsampling", "upsampling", {"decode": {"fancy_upsampling": False}})]
    (pair,) = partnered(halves, "opencv", Preprocess())
    assert pair.culprit == "idct + upsampling"
    assert pair.overrides == {"decode": {"fast_idct": True, "fancy_upsampling": False}}


def test_every_partner_is_a_culprit_the_operations_or_the_catalogue_offer():
    """A declared pair whose culprit no hypothesis carries would never be tried."""
    from harness.diagnose.catalogue import candidate_hypotheses

    specs = [Preprocess(), with_overrides(Preprocess(), resize={"mode": "letterbox", "size": [640, 640]}),
             with_overrides(Preprocess(), resize={"mode": "limit_side", "size": [736]})]
    offered = {h.culprit for p in specs for recipe in ("opencv", "torchvision") for h in candidate_hypotheses(recipe, p, p)}
    for first, second in operations.partners():
        assert {first, second} <= offered, (first, second)


@pytest.mark.parametrize("name", ["CV2_DEFAULT", "TORCHVISION_DEFAULT"])
def test_a_filter_the_code_fixes_runs_through_the_kernels_as_the_spec_holding_it(name):
    """A fixed filter (a detector's, the recognizer's, the training crop's) is a named value of the
    operation, and each backend's kernel resizes with it exactly as with a spec saying the same."""
    import torch

    from harness.operations import resize_filter

    fixed = getattr(resize_filter, name)
    spec = with_overrides(Preprocess(), resize={"interpolation": fixed.interpolation, "antialias": fixed.antialias}).resize
    image = opencv.decode((PHOTOS_DIR / "fruits.jpg").read_bytes(), Preprocess().decode)
    kernels = resize_filter.OPERATION.kernels
    if not fixed.antialias:  # cv2.resize cannot low-pass a linear filter (the kernel's refusal)
        np.testing.assert_array_equal(kernels["opencv"](image, (101, 157), fixed), kernels["opencv"](image, (101, 157), spec))
    tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
    assert torch.equal(kernels["torch"](tensor, [101, 157], fixed), kernels["torch"](tensor, [101, 157], spec))
    assert resize_filter.torchvision_arguments(fixed) == resize_filter.torchvision_arguments(spec)


@pytest.mark.parametrize("resize", [{"mode": "shorter_side", "size": [256], "size_rounding": "floor"},
                                    {"mode": "shorter_side", "size": [224], "size_rounding": "half_up"},
                                    {"mode": "stretch", "size": [224, 320]},
                                    {"mode": "letterbox", "size": [480, 640], "scaleup": False},
                                    {"mode": "limit_side", "size": [736], "limit_side_len": 480, "limit_type": "max",
                                     "max_side_limit": 400}], ids=lambda r: r["mode"])
def test_each_modes_arithmetic_is_one_function_in_numbers_and_in_dali_nodes(resize):
    """The resize mode's kernels: the output size the spec, the recipes and the geometry read
    (numbers) is the one the DALI graph computes per sample, over many source sizes."""
    from nvidia.dali import fn, pipeline_def, types

    from harness.operations import resize_mode

    r = with_overrides(Preprocess(), resize=resize).resize
    rng = np.random.default_rng(5)
    sizes = [(int(rng.integers(64, 1400)), int(rng.integers(64, 1400))) for _ in range(30)] + [(375, 500), (257, 256),
                                                                                                  (882, 694)]

    @pipeline_def(batch_size=len(sizes), num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        image = fn.external_source(name="X", layout="HWC", dtype=types.UINT8, ndim=3)
        return fn.stack(*resize_mode.DALI_SIZES[r.mode](image, r))

    pipe = pipeline()
    pipe.build()
    pipe.feed_input("X", [np.zeros((h, w, 1), np.uint8) for h, w in sizes])
    (out,) = pipe.run()
    for i, (h, w) in enumerate(sizes):
        expected = resize_mode.OPERATION.kernels["opencv"](h, w, r)
        assert tuple(int(v) for v in np.array(out[i])) == expected == r.output_size(h, w), (h, w)


@pytest.mark.parametrize("resize", [{}, {"auto": True}, {"auto": True, "stride": 64, "pad_rounding": "half_up"},
                                    {"pad_position": "top_left"}, {"pad_rounding": "half_up", "size": [480, 640]}],
                         ids=str)
def test_a_letterboxs_padding_is_one_arithmetic_in_numbers_and_in_dali_nodes(resize):
    """The resize mode's padding: the ints the geometry, OpenCV and torchvision pad with are the
    float64 nodes the DALI graph pads with (and answers in GEOMETRY), odd and even margins alike."""
    from nvidia.dali import fn, pipeline_def, types

    from harness.operations import resize_mode

    r = with_overrides(Preprocess(), resize={"mode": "letterbox", "size": [640, 640], **resize}).resize.detector()
    resized = [(h, w) for h, w in [(h, w) for h in (1, 333, 479, 480, 639) for w in (2, 427, 640)] + [(97, 129), (640, 411)]
               if h <= r.size[0] and w <= r.size[-1]]  # a letterbox's resized image fits its size

    @pipeline_def(batch_size=len(resized), num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        image = fn.external_source(name="X", layout="HWC", dtype=types.UINT8, ndim=3)
        return fn.stack(*resize_mode.dali_letterbox_padding(image, r))

    pipe = pipeline()
    pipe.build()
    pipe.feed_input("X", [np.zeros((h, w, 1), np.uint8) for h, w in resized])
    (out,) = pipe.run()
    for i, (h, w) in enumerate(resized):
        padding = resize_mode.letterbox_padding(h, w, r)
        assert tuple(int(v) for v in np.array(out[i])) == padding, (h, w)
        assert all(isinstance(v, int) and v >= 0 for v in padding)


@pytest.mark.parametrize("rounding", ["auto", "half_up", "half_even", "floor"])
def test_the_crop_kernels_of_every_backend_cut_the_window_of_the_offsets_rule(rounding):
    """An odd margin on both sides (the half pixel each rounding settles differently): OpenCV's,
    torchvision's (PIL and tensor) and DALI's crop kernels cut the window :func:`crop.offsets`
    places; ``auto`` is each library's own (torchvision's round() half to even, the others' half up)."""
    import torch
    from PIL import Image

    from harness.operations import crop

    p = with_overrides(Preprocess(), crop={"size": [224, 224], "offset_rounding": rounding})
    image = opencv.decode((PHOTOS_DIR / "fruits.jpg").read_bytes(), p.decode)[:257, :261]  # margins 16.5, 18.5
    native = "half_even" if rounding == "auto" else rounding
    top, left = crop.offsets(with_overrides(p, crop={"offset_rounding": native}).crop, 257, 261)
    torchvision_window = image[top:top + 224, left:left + 224]
    top, left = p.crop.offsets(257, 261)
    window = image[top:top + 224, left:left + 224]
    assert (top, left) == {"half_even": (16, 18), "floor": (16, 18)}.get(rounding, (17, 19))
    np.testing.assert_array_equal(operations.apply(Stage.CROP, "opencv", image, p), window)
    np.testing.assert_array_equal(np.asarray(operations.apply(Stage.CROP, "torchvision", Image.fromarray(image), p)),
                                  torchvision_window)
    tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
    np.testing.assert_array_equal(operations.apply(Stage.CROP, "torch", tensor, p).permute(1, 2, 0).numpy(),
                                  torchvision_window)
    np.testing.assert_array_equal(_dali_stage(Stage.CROP, image, p), window)


def test_a_detector_spec_is_not_cropped_by_any_backend():
    """A detector's resize makes the model input itself: the crop's kernels pass its image through."""
    image = np.zeros((300, 260, 3), np.uint8)
    detector = with_overrides(Preprocess(), resize={"mode": "limit_side"})
    for p, shape in ((detector, (300, 260, 3)), (Preprocess(), (224, 224, 3))):
        assert operations.apply(Stage.CROP, "opencv", image, p).shape == shape
        assert _dali_stage(Stage.CROP, image, p).shape == shape


def test_the_decoders_switches_are_refused_by_opencv_alone_by_the_one_rule():
    """cv2.imdecode has libjpeg's defaults only: the decode's OpenCV kernel refuses a switch
    (serving and diagnose alike); DALI's and the reference's decoders take it."""
    from harness.reference import BUILT_IN

    fast = with_overrides(Preprocess(), decode={"fast_idct": True})
    assert "cv2.imdecode always uses fancy upsampling" in operations.refusal("opencv", fast)
    with pytest.raises(SpecError, match="cv2.imdecode always uses"):
        opencv.check_supported(fast)
    assert operations.refusal("dali", fast) is None and operations.refusal("torchvision", fast) is None
    photo = (PHOTOS_DIR / "baboon.jpg").read_bytes()
    fast_decoded = BUILT_IN["opencv"](fast)(photo)[Stage.DECODE]  # the reference's libjpeg-turbo
    assert np.abs(fast_decoded.astype(int) - opencv.decode(photo, fast.decode).astype(int)).max() > 0


def test_the_catalogue_offers_each_operations_alternatives():
    """Diagnose's hypotheses of the crop and the decode come from their modules: one per
    rounding not the reference's, one per decoder switch flipped; none of the crop for a detector."""
    from harness.diagnose.catalogue import candidate_hypotheses

    p = Preprocess()
    offered = {a.name: a.culprit for a in operations.alternatives("opencv", p, p, "crop", "decode")}
    names = {h.name: h.culprit for h in candidate_hypotheses("opencv", p, p)}
    assert offered.items() <= names.items()
    assert {n for n, c in offered.items() if c == "crop offset rounding"} == {
        "crop offsets rounded half_up", "crop offsets rounded half_even", "crop offsets rounded floor"}
    assert {"fancy upsampling off", "fast IDCT", "EXIF orientation ignored"} <= set(offered)
    detector = with_overrides(p, resize={"mode": "letterbox", "size": [640, 640]})
    assert not [h for h in candidate_hypotheses("opencv", detector, detector) if h.culprit == "crop offset rounding"]


@pytest.mark.parametrize("table", [{}, {"crop": "axis_aligned"}, {"rotate_ratio": 0.0}, {"rotate_ratio": 5.0}])
def test_the_word_crops_geometry_rule_is_what_its_kernels_cut(table):
    """The recognizer's crop: its geometry rule (the warp and size the ocr models send the DALI
    kernel) gives the OpenCV kernel's crop, a tall box turned upright by the one rotation rule."""
    from harness.ocr.recognition import parameters
    from harness.operations import word_crop

    p = parameters(table)
    image = opencv.decode((PHOTOS_DIR / "fruits.jpg").read_bytes(), Preprocess().decode)
    for quad in ([[40, 30], [70, 32], [69, 150], [39, 149]], [[100, 100], [260, 110], [258, 140], [98, 131]]):
        crop = word_crop.crop_box(image, np.array(quad, np.float32), p)
        matrix, size = word_crop.crop_geometry(quad, p, image.shape[:2])
        assert crop.shape[:2] == size
        tall = quad[2][1] - quad[0][1] > 100  # 4 times higher than wide: turned where the rule's ratio is 1.5
        assert crop.shape[0] < crop.shape[1] if not tall or p.rotate_ratio == 1.5 else crop.shape[0] > crop.shape[1]
        assert np.abs(_dali_word(image, matrix, size).astype(int) - crop.astype(int)).mean() < 1.0


def _dali_word(image: np.ndarray, matrix: np.ndarray, size) -> np.ndarray:
    from nvidia.dali import fn, pipeline_def, types

    from harness.operations import word_crop

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        region = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=3, layout="HWC")
        warp = fn.external_source(name="MATRIX", dtype=types.FLOAT, ndim=2)
        extent = fn.external_source(name="SIZE", dtype=types.FLOAT, ndim=1)
        return word_crop.OPERATION.kernels["dali"](region, warp, extent)

    pipe = pipeline()
    pipe.build()
    for name, value in (("IMAGE", image), ("MATRIX", matrix.astype(np.float32)), ("SIZE", np.array(size, np.float32))):
        pipe.feed_input(name, [np.ascontiguousarray(value)])
    (out,) = pipe.run()
    return np.array(out[0])


def _dali_stage(stage: Stage, image: np.ndarray, p: Preprocess) -> np.ndarray:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipeline():
        node = fn.external_source(name="IMAGE", device="cpu", dtype=types.UINT8, ndim=3, layout="HWC")
        return operations.apply(stage, "dali", node, p)

    pipe = pipeline()
    pipe.build()
    pipe.feed_input("IMAGE", [np.ascontiguousarray(image)])
    (out,) = pipe.run()
    return np.array(out[0])


# -- the postprocessings' keys: one record each (harness/postprocessing.py) --------------------


@pytest.mark.parametrize("name", sorted(postprocessing.PARAMETERS))
def test_a_postprocessings_values_tried_are_its_own_keys_and_accepted_values(name):
    """What diagnose tries of a ``[postprocess]`` key is declared beside the key: a field of the
    record, each value one the spec accepts, the default among them."""
    record = postprocessing.PARAMETERS[name]
    assert record.tried and set(record.tried) <= {f.name for f in dataclasses.fields(record)}
    for key, (culprit, values) in record.tried.items():
        assert culprit and getattr(record(), key) in values, key
        for value in values:
            postprocessing.parameters({"name": name, key: value})


def test_each_task_diagnoses_the_values_its_postprocessings_records_declare(monkeypatch):
    """A value tried added to a record reaches the task's diagnose without editing the task; a
    task tries only its own postprocessings."""
    from harness.task.detection import postprocess_hypotheses as detection
    from harness.task.segmentation import postprocess_hypotheses as segmentation

    monkeypatch.setattr(postprocessing.DbParams, "tried", {"max_candidates": ("DB candidates", (10, 1000))})
    monkeypatch.setattr(postprocessing.SaliencyParams, "tried", {"minmax": ("min-max", (True, False))})
    assert [(h.culprit, h.changes) for h in detection({"name": "db"})] == [("DB candidates", (("max_candidates", 1000, 10),))]
    assert [(h.culprit, h.changes) for h in segmentation({"name": "saliency"})] == [("min-max", (("minmax", True, False),))]
    assert detection({"name": "saliency"}) == [] and segmentation({"name": "db"}) == []
