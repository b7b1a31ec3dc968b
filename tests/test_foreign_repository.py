"""The foreign example deployment (examples/foreign_deployment) on the real embedded
tritonserver, with real photos, over HTTP and gRPC: the ensemble classifies like the
training preprocessing does, its steps called one by one reproduce it, the planted
parameters change what they should, a bad file fails only its own request, and the
unbatched variant serves too."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image, ImageOps
from tritonclient.utils import InferenceServerException

from harness.paths import PROJECT_ROOT
from tests.foreign import ENSEMBLE

ONNX = PROJECT_ROOT / "model_repository" / "classifier" / "model.onnx"
PHOTOS = sorted((PROJECT_ROOT / "data" / "photos").glob("*.jpg"))[:3]
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)

pytestmark = pytest.mark.skipif(not ONNX.exists() or not PHOTOS, reason="run `make setup` first")


@pytest.fixture
def aligned(foreign_aligned):
    return foreign_aligned  # one server for every module that uses it (tests/conftest.py)


@pytest.fixture
def planted(foreign_planted):
    return foreign_planted


@pytest.fixture
def unbatched(foreign_unbatched):
    return foreign_unbatched


def infer(server, protocol, model, name, array, output, datatype):
    """One request; ``array`` already has the shape the model wants (batch dim included or not)."""
    module = httpclient if protocol == "http" else grpcclient
    with module.InferenceServerClient(server.url(protocol)) as client:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput(output)])
        return result.as_numpy(output)


def encoded(path, batched=True):
    data = np.array([path.read_bytes()], dtype=object)
    return data[None] if batched else data


def reference_logits(path):
    """Training preprocessing in-process (PIL, EXIF, bilinear stretch, ImageNet mean/std)."""
    with Image.open(path) as image:
        rgb = ImageOps.exif_transpose(image).convert("RGB").resize((224, 224), Image.BILINEAR)
    x = ((np.asarray(rgb, np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1)[None]
    session = ort.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {session.get_inputs()[0].name: np.ascontiguousarray(x, np.float32)})[0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_top1_matches_training(aligned, protocol):
    for photo in PHOTOS:
        scores = infer(aligned, protocol, ENSEMBLE, "encoded_image", encoded(photo), "scores", "BYTES")
        assert scores.shape == (1, 1000) and scores.dtype == np.float32
        expected = reference_logits(photo)
        assert scores.argmax() == expected.argmax(), photo.name
        np.testing.assert_allclose(scores, expected, atol=1e-3)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_steps_reproduce_ensemble(aligned, protocol):
    photo = PHOTOS[0]
    nhwc = infer(aligned, protocol, "jpeg_to_tensor", "encoded", encoded(photo), "image_nhwc", "BYTES")
    assert nhwc.shape == (1, 224, 224, 3)
    nchw = infer(aligned, protocol, "hwc_to_chw", "image_nhwc", nhwc, "pixels_nchw", "FP32")
    assert nchw.shape == (1, 3, 224, 224)
    scores = infer(aligned, protocol, "effnet_scores", "pixels_nchw", nchw, "class_scores", "FP32")
    ensemble = infer(aligned, protocol, ENSEMBLE, "encoded_image", encoded(photo), "scores", "BYTES")
    np.testing.assert_array_equal(scores, ensemble)


def colourful_photo():
    """A photo whose channels differ (some corpus photos are grey: a channel flip is invisible there)."""
    for path in sorted((PROJECT_ROOT / "data" / "photos").glob("*.jpg")):
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB").resize((64, 64)), np.float32)
        if np.abs(pixels[..., 0] - pixels[..., 2]).mean() > 20:
            return path
    raise AssertionError("no colourful photo in the corpus")


def test_planted_parameters(aligned, planted):
    photo = colourful_photo()
    good = infer(aligned, "grpc", "jpeg_to_tensor", "encoded", encoded(photo), "image_nhwc", "BYTES")
    sharp = infer(planted, "grpc", "jpeg_to_tensor", "encoded", encoded(photo), "image_nhwc", "BYTES")
    assert np.abs(good - sharp).max() > 10  # no antialias: aliasing on a real photo

    rgb = infer(aligned, "grpc", "hwc_to_chw", "image_nhwc", good, "pixels_nchw", "FP32")
    bgr = infer(planted, "grpc", "hwc_to_chw", "image_nhwc", good, "pixels_nchw", "FP32")
    # BGR flips the pixels, then normalizes with the same (RGB) mean/std.
    flipped = ((good[..., ::-1] / 255 - MEAN) / STD).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(bgr, flipped, atol=1e-5)
    np.testing.assert_allclose(rgb, ((good / 255 - MEAN) / STD).transpose(0, 3, 1, 2), atol=1e-5)
    assert np.abs(rgb - bgr).max() > 0.5


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_file_fails_only_its_request(aligned, protocol):
    good = PHOTOS[0].read_bytes()
    rng = np.random.default_rng(0)
    for bad in (good[: len(good) // 3], rng.bytes(5000)):
        with pytest.raises(InferenceServerException) as failure:
            infer(aligned, protocol, ENSEMBLE, "encoded_image", np.array([[bad]], dtype=object), "scores", "BYTES")
        assert "cannot decode" in str(failure.value)
        assert "\n" not in str(failure.value).strip()
        # The server goes on serving.
        scores = infer(aligned, protocol, ENSEMBLE, "encoded_image", encoded(PHOTOS[0]), "scores", "BYTES")
        assert scores.shape == (1, 1000)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unbatched_serves(unbatched, protocol):
    photo = PHOTOS[0]
    scores = infer(unbatched, protocol, ENSEMBLE, "encoded_image", encoded(photo, batched=False), "scores", "BYTES")
    assert scores.shape == (1000,)
    assert scores.argmax() == reference_logits(photo).argmax()
