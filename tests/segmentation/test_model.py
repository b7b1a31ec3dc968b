"""The segmenter as exported (U2-Net-p out of its wheel, batch made dynamic), the spec's new
keys, and the reference replaying rembg's own arithmetic on real photos. No server."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.model import ONNX_FILENAME, onnx_session
from harness.paths import PROJECT_ROOT
from harness.preprocessing import opencv
from harness.preprocessing.dali_graph import CpuPipelineRunner, missing_arguments, pipeline_arguments
from harness.reference.recipes import TorchvisionRecipe
from harness.segmentation.model import INPUT_NAME, OUTPUT_NAME, SEGMENTER
from harness.segmentation.postprocess import SegmentationPostprocess
from harness.spec import SpecError, load_spec, parse_spec
from harness.stage import Stage

SPEC = PROJECT_ROOT / "model_repository" / "segmentation.toml"
PHOTOS = ("HappyFish.jpg", "Blender_Suzanne1.jpg", "baboon.jpg")


@pytest.fixture(scope="module")
def session(repository):
    return onnx_session(repository / SEGMENTER / ONNX_FILENAME, threads=1)


def test_a_batch_of_three_answers_as_three_batches_of_one(session):
    x = np.random.default_rng(0).normal(size=(3, 3, 320, 320)).astype(np.float32)
    batch = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
    ones = np.concatenate([session.run([OUTPUT_NAME], {INPUT_NAME: x[i:i + 1]})[0] for i in range(3)])
    assert batch.shape == (3, 1, 320, 320)
    assert np.array_equal(batch, ones)
    assert [i.shape[0] for i in session.get_inputs()] == ["batch"]


def test_the_notices_travel_with_the_model(repository):
    folder = repository / SEGMENTER
    assert "MIT License" in (folder / "LICENSE.txt").read_text()
    notice = " ".join((folder / "NOTICE").read_text().split())
    assert "Apache License, Version 2.0" in notice and "batch" in notice


def rembg_input(data: bytes) -> np.ndarray:
    """rembg's session_base.BaseSession.normalize, as the wheel writes it (float64, then float32)."""
    import io

    im = Image.open(io.BytesIO(data)).convert("RGB").resize((320, 320), Image.LANCZOS)
    ary = np.array(im)
    ary = ary / np.max(ary)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = np.stack([(ary[:, :, c] - mean[c]) / std[c] for c in range(3)])
    return out.astype(np.float32)


def rembg_matte(pred: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """rembg's session_simple.SimpleSession.predict after the model: min-max, uint8, LANCZOS back."""
    pred = (pred - pred.min()) / (pred.max() - pred.min())
    mask = Image.fromarray((np.squeeze(pred) * 255).astype("uint8"), mode="L").resize(size[::-1], Image.LANCZOS)
    return np.asarray(mask)


@pytest.mark.parametrize("photo", PHOTOS)
def test_the_default_spec_replays_rembg(photo, photos_dir, session):
    data = (photos_dir / photo).read_bytes()
    spec = load_spec(SPEC)
    stages = TorchvisionRecipe(spec.reference.preprocess)(data)
    assert np.abs(stages[Stage.INPUT] - rembg_input(data)).max() < 1e-5
    served = opencv.run(data, spec.preprocess)[Stage.INPUT]  # the CPU twin serves the same
    assert np.abs(served - stages[Stage.INPUT]).max() < 1e-5
    pred = session.run([OUTPUT_NAME], {INPUT_NAME: stages[Stage.INPUT][None]})[0][:, 0]
    size = stages[Stage.DECODE].shape[:2]
    result = SegmentationPostprocess(spec.postprocess)({OUTPUT_NAME: pred[0][None]}, size)
    assert np.array_equal(np.round(result[0] * 255).astype(np.uint8), rembg_matte(pred, size))
    assert set(np.unique(result[1])) <= {0.0, 1.0} and 0 < result[1].mean() < 1


def test_the_dali_graph_computes_the_maximum_per_image_with_dali_2_1_1_arguments(photos_dir):
    spec = load_spec(SPEC)
    runner = CpuPipelineRunner(spec.preprocess, 2, taps=True, geometry=True)
    arguments = pipeline_arguments(runner._pipe)
    assert "reductions__Max" in arguments and not missing_arguments(arguments)
    images = [np.frombuffer((photos_dir / p).read_bytes(), np.uint8) for p in PHOTOS[:2]]
    for result, data in zip(runner.run(images), images):
        decoded, resized, _, model_input, geometry = result.outputs
        assert list(geometry[:4]) == [*decoded.shape[:2], 320, 320]
        # the brightest value of the resized image maps to (1 - mean) / std: divided by its own maximum
        expect = (1 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
        brightest = np.unravel_index(np.argmax(resized), resized.shape)
        assert model_input[brightest[2], brightest[0], brightest[1]] == pytest.approx(expect[brightest[2]], abs=1e-4)


def test_the_spec_refuses_an_unknown_divisor_and_postprocessing_keys():
    with pytest.raises(SpecError, match="divide_by"):
        parse_spec({"normalize": {"divide_by": "mean"}})
    with pytest.raises(SpecError, match="threshold"):
        parse_spec({"postprocess": {"name": "saliency", "threshold": 2}})
    with pytest.raises(SpecError, match="no parameter"):
        parse_spec({"postprocess": {"name": "saliency", "unclip_ratio": 2}})
