"""Real photos through the real embedded Triton server (cpu profile), over HTTP and gRPC."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from harness.client import PIPELINES, InferenceError, TritonClient
from harness.model import ONNX_FILENAME, onnx_session
from harness.preprocessing import PREPROCESS_STAGES, opencv
from harness.preprocessing.dali_graph import CpuPipelineRunner
from tests.conftest import encode, random_bytes

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "rocket.jpg"]
ALL_MODELS = ["classify_dali", "classify_opencv", "preprocess_dali", "preprocess_dali_taps", "preprocess_opencv", "classifier"]


@pytest.fixture(scope="module")
def session(repository):
    return onnx_session(repository / "classifier" / ONNX_FILENAME)


@pytest.fixture(scope="module")
def in_process(spec, session):
    """The deployed pipelines run in this process: DALI (CPU decoder) or OpenCV, then ONNX Runtime."""
    dali = CpuPipelineRunner(spec.preprocess, max_batch_size=8)

    def run(images: list[bytes], pipeline: str) -> np.ndarray:
        if pipeline == "dali":
            batch = np.stack([r.outputs[0] for r in dali.run([np.frombuffer(b, np.uint8) for b in images])])
        else:
            batch = np.stack([opencv.run(b, spec.preprocess)["input"] for b in images])
        return session.run(["logits"], {"input": batch})[0]

    return run


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_real_photos_get_their_imagenet_class(client, photo, pipeline):
    top = client.classify([photo("squirrel_cls.jpg"), photo("baboon.jpg")], pipeline, top_k=5)
    assert [t[0].label for t in top] == ["fox squirrel", "baboon"]
    assert all(len(t) == 5 and t[0].score > 0.8 and t[0].score >= t[1].score for t in top)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_ensembles_match_the_same_pipeline_run_in_process(client, photo, in_process, pipeline):
    images = [photo(n) for n in PHOTOS]
    served = np.concatenate([client.logits([image], pipeline) for image in images])
    expected = in_process(images, pipeline)
    assert np.abs(served - expected).max() < 1e-3
    assert list(served.argmax(1)) == list(expected.argmax(1))


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_stage_taps_are_bit_exact_known_answers(client, photo, spec, pipeline):
    # Guards against silent tensor corruption in the server (numpy 2 in the Python backend
    # of this Triton returns the first element repeated): the served stages must equal the
    # same implementation run here, to the bit.
    data = photo("fruits.jpg")
    served = client.stages(data, pipeline)
    if pipeline == "opencv":
        expected = opencv.run(data, spec.preprocess)
    else:
        outputs = CpuPipelineRunner(spec.preprocess, 1, taps=True).run([np.frombuffer(data, np.uint8)])[0].outputs
        expected = dict(zip(PREPROCESS_STAGES, outputs))
    for stage in PREPROCESS_STAGES:
        assert served[stage].shape == expected[stage].shape, stage
        assert np.array_equal(served[stage], expected[stage].astype(served[stage].dtype)), stage
    assert len(np.unique(served["input"])) > 100


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_batched_and_concurrent_requests_answer_like_single_ones(server, client, photo, pipeline):
    images = [photo(n) for n in PHOTOS]
    single = np.concatenate([client.logits([image], pipeline) for image in images])
    batched = client.logits(images, pipeline)  # one request, files zero padded to one length
    assert np.allclose(batched, single, atol=1e-4)

    def one(i):
        with TritonClient(server.url(client.protocol), client.protocol) as c:
            return i % len(images), c.logits([images[i % len(images)]], pipeline)[0]

    with ThreadPoolExecutor(8) as pool:
        for i, logits in pool.map(one, range(24)):
            assert np.allclose(logits, single[i], atol=1e-4)


def _bad_inputs(photo, squirrel_image):
    jpeg = photo("squirrel_cls.jpg")
    return {
        "empty": (b"", "empty image"),
        "random bytes": (random_bytes(5000), "not an image: unrecognized file signature"),
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "truncated JPEG"),
        "text file": (b"label,score\nsquirrel,0.9\n" * 20, "looks like text"),
        "PNG": (encode(squirrel_image, "PNG"), "fox squirrel"),
        "grayscale JPEG": (encode(squirrel_image.convert("L"), quality=95), "fox squirrel"),
        "CMYK JPEG": (encode(squirrel_image.convert("CMYK"), quality=95), "fox squirrel"),
    }


@pytest.mark.parametrize("case", ["empty", "random bytes", "truncated JPEG", "text file", "PNG", "grayscale JPEG", "CMYK JPEG"])
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_bad_input_fails_only_its_own_request(client, photo, squirrel_image, case, pipeline):
    data, expected = _bad_inputs(photo, squirrel_image)[case]
    if expected == "fox squirrel":  # legitimately decodable: classified correctly
        assert client.classify([data], pipeline, 1)[0][0].label == expected
    else:
        with pytest.raises(InferenceError) as err:
            client.classify([data], pipeline, 1)
        message = str(err.value)
        assert expected in message and "Traceback" not in message and len(message.splitlines()) == 1
    assert client.is_ready() and all(client.is_ready(m) for m in ALL_MODELS)
    assert client.classify([photo("baboon.jpg")], pipeline, 1)[0][0].label == "baboon"


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_bad_image_among_concurrent_good_requests(server, photo, pipeline):
    good, bad = photo("baboon.jpg"), b"\xff\xd8\xff\xe0 broken"

    def one(i):
        with TritonClient(server.grpc_url, "grpc") as c:
            try:
                return i, c.classify([bad if i % 4 == 0 else good], pipeline, 1)[0][0].label
            except InferenceError as exc:
                return i, exc

    with ThreadPoolExecutor(8) as pool:
        for i, answer in pool.map(one, range(16)):
            if i % 4 == 0:
                assert isinstance(answer, InferenceError) and "JPEG" in str(answer)
            else:
                assert answer == "baboon"


def test_taps_of_several_images_of_different_sizes_are_refused_clearly(client, photo):
    from harness.packing import pack_images

    with pytest.raises(InferenceError, match="different shape for each image"):
        client.infer("preprocess_opencv", {"IMAGE": pack_images([photo("baboon.jpg"), photo("rocket.jpg")])}, ["DECODED"])
    # the model input has one shape whatever the photo: fine in one request
    out = client.infer("preprocess_opencv", {"IMAGE": pack_images([photo("baboon.jpg"), photo("rocket.jpg")])}, ["INPUT"])
    assert out["INPUT"].shape == (2, 3, 224, 224)


IMAGE_MODELS = ["classify_dali", "classify_opencv", "preprocess_dali_taps", "preprocess_opencv", "validate_image",
                "preprocess_dali"]


@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_a_bad_image_is_the_clients_error_400_invalid_argument(server, model):
    """What the client sent is wrong, not the server: INVALID_ARGUMENT over gRPC, 400 over HTTP
    (the ensembles pass their step's status on)."""
    import json
    import urllib.error
    import urllib.request

    import tritonclient.grpc as grpc

    bad = np.frombuffer(b"this is not an image", np.uint8)[None]
    body = {"inputs": [{"name": "IMAGE", "shape": list(bad.shape), "datatype": "UINT8", "data": bad.ravel().tolist()}]}
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{model}/infer", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as http_error:
        urllib.request.urlopen(request, timeout=60)
    assert http_error.value.code == 400 and b"not an image" in http_error.value.read()
    tensor = grpc.InferInput("IMAGE", list(bad.shape), "UINT8")
    tensor.set_data_from_numpy(bad)
    with grpc.InferenceServerClient(server.grpc_url) as client, pytest.raises(Exception) as grpc_error:
        client.infer(model, [tensor], client_timeout=60)
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT" and "not an image" in grpc_error.value.message()


def test_a_burst_beyond_the_queue_is_refused_fast_and_the_server_goes_on(server, photo):
    """The cpu profile's queue policy (harness.repository.CPU_QUEUE_POLICY): 200 requests at once
    into queues of 16, the excess refused as overload within the second rather than queued;
    those answered are right; the server serves as before afterwards."""
    import threading
    import time

    import tritonclient.grpc as grpc

    from harness.client import TritonClient

    data = np.frombuffer(photo("squirrel_cls.jpg"), np.uint8)[None]
    done, outcomes, lock = threading.Event(), [], threading.Lock()
    client = grpc.InferenceServerClient(server.grpc_url)
    start = time.perf_counter()

    def callback(result, error):
        with lock:
            outcomes.append((time.perf_counter() - start, result, error))
            if len(outcomes) == 200:
                done.set()

    for _ in range(200):
        tensor = grpc.InferInput("IMAGE", list(data.shape), "UINT8")
        tensor.set_data_from_numpy(data)
        client.async_infer("classify_dali", [tensor], callback, client_timeout=120,
                           outputs=[grpc.InferRequestedOutput("PROBABILITIES", class_count=1)])
    assert done.wait(300)
    client.close()
    refused = [(t, e) for t, _, e in outcomes if e is not None]
    answered = [r for _, r, e in outcomes if e is None]
    assert refused and answered, "200 at once should fill a queue of 16"
    assert all("Exceeds maximum queue size" in e.message() or "Request timeout expired" in e.message()
               for _, e in refused), {e.message() for _, e in refused}
    assert sorted(t for t, _ in refused)[len(refused) // 2] < 1.0  # refused fast: the median within the second
    assert all(r.as_numpy("PROBABILITIES")[0][0].decode().endswith("fox squirrel") for r in answered)
    with TritonClient(server.grpc_url, "grpc", timeout=60) as after:
        assert after.classify([photo("squirrel_cls.jpg")], "dali")[0][0].label == "fox squirrel"
