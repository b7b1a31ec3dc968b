"""The DALI (CPU decoder) and OpenCV implementations of the same spec, on real photos."""

import numpy as np
import pytest

from harness.preprocessing import PREPROCESS_STAGES, ImageError, opencv
from harness.preprocessing.dali_graph import CpuPipelineRunner
from harness.spec import SpecError, with_overrides
from tests.conftest import encode

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "retina.jpg", "china.jpg", "left01.jpg", "aero3.jpg"]


@pytest.mark.parametrize("overrides", [
    {},
    {"input": {"channel_order": "BGR"},
     "normalize": {"pixel_range": 1.0, "mean": [0.406, 0.456, 0.485], "std": [0.225, 0.224, 0.229]}},
    {"resize": {"mode": "stretch", "size": [240, 260], "dtype": "float32"}},
])
def test_dali_cpu_matches_opencv_within_one_level(spec, photo, overrides):
    p = with_overrides(spec.preprocess, **overrides)
    data = [np.frombuffer(photo(n), np.uint8) for n in PHOTOS]
    results = CpuPipelineRunner(p, max_batch_size=4, taps=True).run(data)
    for name, d, res in zip(PHOTOS, data, results):
        assert res.error is None, name
        taps = dict(zip(PREPROCESS_STAGES, res.outputs))  # the graph taps every stage, in order
        decoded, resized, cropped, model_input = (taps[s] for s in ("decode", "resize", "crop", "input"))
        ref = opencv.run(d, p)
        # On the CPU, DALI and OpenCV decode with the same libjpeg-turbo: bit-identical.
        assert np.array_equal(decoded, ref["decode"]), name
        assert resized.shape == ref["resize"].shape and cropped.shape == ref["crop"].shape
        assert np.abs(resized - ref["resize"]).max() <= 1.0, name
        assert np.abs(cropped - ref["crop"]).max() <= 1.0, name
        assert model_input.shape == ref["input"].shape == p.input_shape
        assert np.abs(model_input - ref["input"]).max() <= 1.0 / min(p.normalize.mean_std_in_pixels()[1]) + 1e-5


def test_bgr_input_reverses_channels(spec, photo):
    rgb = opencv.run(photo("fruits.jpg"), spec.preprocess)["input"]
    bgr = opencv.run(photo("fruits.jpg"), with_overrides(spec.preprocess, input={"channel_order": "BGR"}))["input"]
    assert np.array_equal(bgr, rgb[::-1])


def test_antialias_changes_the_dali_resize(spec, photo):
    data = [np.frombuffer(photo("baboon.jpg"), np.uint8)]
    plain = CpuPipelineRunner(spec.preprocess, 1, taps=True).run(data)[0].outputs[1]
    smooth = CpuPipelineRunner(with_overrides(spec.preprocess, resize={"antialias": True}), 1, taps=True).run(data)[0].outputs[1]
    assert np.abs(plain - smooth).max() > 20  # the baboon's fur aliases badly without it


def test_runner_isolates_bad_images_in_a_batch(spec, photo, squirrel_image):
    good = np.frombuffer(photo("squirrel_cls.jpg"), np.uint8)
    batch = [good, np.frombuffer(b"not an image at all", np.uint8), good, np.frombuffer(encode(squirrel_image, "PNG"), np.uint8)]
    results = CpuPipelineRunner(spec.preprocess, max_batch_size=4).run(batch)
    assert [r.error is None for r in results] == [True, False, True, True]
    assert "unrecognized file signature" in str(results[1].error)
    assert np.array_equal(results[0].outputs[0], results[2].outputs[0])


def test_the_decode_only_graph_answers_the_taps_decoded_image_and_nothing_else(repository, photo):
    """ocr_decode_dali's graph (issue 58: ocr_dali's page without a taps model): the detector's spec,
    its decode step alone, bit-identical to the DECODED its stage taps answered; the guard refuses first."""
    from harness.spec import load_spec

    p = load_spec(repository / "detection.toml").preprocess
    data = [np.frombuffer(photo(name), np.uint8) for name in ("fruits.jpg", "baboon.jpg")]
    data.append(np.frombuffer(b"not an image", np.uint8))
    decoded = CpuPipelineRunner(p, 4, decode_only=True).run(data)
    taps = CpuPipelineRunner(p, 4, taps=True).run(data[:2])
    for page, tapped in zip(decoded, taps):
        assert len(page.outputs) == 1 and page.outputs[0].dtype == np.uint8
        assert np.array_equal(page.outputs[0], tapped.outputs[0])
    assert decoded[2].outputs is None and "unrecognized file signature" in str(decoded[2].error)


def test_opencv_refuses_what_it_cannot_do(spec):
    with pytest.raises(SpecError, match="cannot antialias"):
        opencv.check_supported(with_overrides(spec.preprocess, resize={"antialias": True}))
    with pytest.raises(ImageError, match="truncated"):
        opencv.decode(b"\xff\xd8\xff\xe0" + b"\x00\x10" * 20 + b"\xff\xda" + b"\x12" * 100, spec.preprocess.decode)


def test_exif_orientation_is_applied_by_both(spec, squirrel_image):
    from harness.corpus import _exif_rotated

    data = np.frombuffer(_exif_rotated(squirrel_image), np.uint8)
    upright = opencv.decode(data, spec.preprocess.decode)
    assert upright.shape[:2] == (squirrel_image.height, squirrel_image.width)
    dali = CpuPipelineRunner(spec.preprocess, 1, taps=True).run([data])[0].outputs[0]
    assert dali.shape == upright.shape
    ignored = opencv.decode(data, with_overrides(spec.preprocess, decode={"exif_orientation": False}).decode)
    assert ignored.shape[:2] == (squirrel_image.width, squirrel_image.height)
