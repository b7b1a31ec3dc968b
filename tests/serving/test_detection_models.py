"""The detection models against the real embedded server (cpu profile): detect_dali and
detect_opencv answer the reference detector's boxes (rapidocr's preprocessing, in process) on
real photos with text, over HTTP and gRPC; no text, no boxes; a bad image or a malformed
GEOMETRY fails only its own request, as INVALID_ARGUMENT, and the server goes on.

On these 2 cores one 736x992 image takes about 0.5 s in the detector: a handful of photos."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import urllib.error
import urllib.request

import cv2
import numpy as np
import pytest

from harness.client import InferenceError, TritonClient
from harness.detection.boxes import Detections
from harness.detection.compare import compare_detections
from harness.detection.detector import TextDetector
from harness.detection.postprocess import from_table
from harness.geometry import Geometry
from harness.packing import pack_images
from harness.paths import PROJECT_ROOT
from harness.spec import load_spec
from harness.task import get_task
from harness.verdict import Verdict

DETECTION = get_task("detection").repository
RESULTS = ["BOXES", "SCORES", "PROBABILITY", "GEOMETRY"]
SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample" / "images"
TEXT_PHOTOS = ("n04487081_trolleybus.JPEG", "n03891332_parking_meter.JPEG")
"""ImageNet-sample photos with text in them (docs/detection-imagenet-text.json: 16 and 9 boxes)."""
TEXT_CORPUS_PHOTOS = ("grace_hopper.jpg",)
"""A corpus photo (data/photos) with text: the badge and the ribbons, 4 boxes."""
NO_TEXT_PHOTO = "n01530575_brambling.JPEG"
"""The reference finds nothing at all in it (tests/detection/conftest.py CLEAN_PHOTOS)."""


@pytest.fixture(scope="module")
def detection_spec(repository):
    return load_spec(repository / DETECTION.spec)


@pytest.fixture(scope="module")
def reference(detection_spec) -> TextDetector:
    """rapidocr's preprocessing and the DB postprocessing with the spec's own settings."""
    return TextDetector(detection_spec.preprocess.resize.detector(), from_table(detection_spec.postprocess).params,
                        threads=1)


@pytest.fixture(scope="module")
def photos(photos_dir) -> dict[str, bytes]:
    assert SAMPLE.is_dir(), f"the shared ImageNet sample is missing: {SAMPLE}"
    return {**{name: (SAMPLE / name).read_bytes() for name in TEXT_PHOTOS},
            **{name: (photos_dir / name).read_bytes() for name in TEXT_CORPUS_PHOTOS}}


@pytest.fixture(scope="module")
def expected(reference, photos):
    return {name: reference(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)) for name, data in photos.items()}


def detect(client: TritonClient, model: str, data: bytes, outputs=RESULTS) -> dict[str, np.ndarray]:
    """One image's outputs, batch axis removed."""
    return {name: value[0] for name, value in client.infer(model, {"IMAGE": pack_images([data])}, outputs).items()}


@pytest.fixture(scope="module")
def dali_in_process(detection_spec, reference, photos):
    """What detect_dali computes, in this process: the same DALI graph (CPU decoder, as the cpu
    profile serves it), the detector's ONNX, the spec's postprocessing."""
    from harness.preprocessing.dali_graph import CpuPipelineRunner

    runner = CpuPipelineRunner(detection_spec.preprocess, max_batch_size=1)
    out = {}
    for name, data in photos.items():
        model_input, values = runner.run([np.frombuffer(data, np.uint8)])[0].outputs
        geometry = Geometry.from_tensor(values)
        prob = reference.probability(model_input[None])
        out[name] = (geometry, prob, reference.postprocess({"fetch_name_0": prob[0]}, geometry))
    return out


@pytest.mark.parametrize("model", ["detect_dali", "detect_opencv"])
def test_the_ensembles_answer_the_reference_detectors_boxes(client, model, photos, expected, dali_in_process,
                                                            detection_spec):
    """On photos with text, detect_opencv serves the reference's boxes (the same arithmetic:
    the same boxes); detect_dali serves exactly what its DALI graph, the model and the
    postprocessing give in process, and the reference's boxes up to DALI's resize (one level
    from cv2's on about 12% of the input's pixels): every box matched, corners within a pixel,
    scores within 0.1 (on the parking meter one small word's score moves by 0.068, beyond
    compare_detections' score_atol of 0.05: a verdict of its own for the harness to report)."""
    threshold = from_table(detection_spec.postprocess).params.score_threshold
    for name, data in photos.items():
        want = expected[name]
        out = detect(client, model, data)
        assert out["BOXES"].dtype == out["SCORES"].dtype == np.float32 and out["GEOMETRY"].dtype == np.int32
        assert out["BOXES"].shape == (len(out["SCORES"]), 4, 2)
        assert Geometry.from_tensor(out["GEOMETRY"]) == want.geometry, name
        assert out["PROBABILITY"].shape == want.probability.shape[1:], name
        assert len(want.detections) >= 4, name  # photos with text: boxes to compare
        served = Detections(out["BOXES"], out["SCORES"])
        result = compare_detections(want.detections, served, threshold, image_size=want.geometry.source)
        if model == "detect_opencv":
            assert result.verdict in (Verdict.EQUAL, Verdict.CLOSE), (name, result.events())
            assert np.max(np.abs(out["PROBABILITY"] - want.probability[0])) < 1e-4, name
            assert len(served) == len(want.detections) and result.worst_corner_px <= 1.0, (name, result.events())
            continue
        geometry, prob, same_graph = dali_in_process[name]
        assert np.max(np.abs(out["PROBABILITY"] - prob[0])) < 1e-4, name
        exact = compare_detections(same_graph, served, threshold, image_size=geometry.source)
        assert exact.verdict in (Verdict.EQUAL, Verdict.CLOSE) and len(served) == len(same_graph), (name, exact.events())
        assert exact.worst_corner_px <= 0.5 and abs(exact.max_score_delta) < 1e-4, (name, exact.events())
        assert not [c for c in (*result.missed, *result.extra) if not c.near_threshold], (name, result.events())
        assert result.worst_corner_px <= 1.5 and abs(result.max_score_delta) < 0.1, (name, result.events())


def test_a_photo_without_text_answers_no_boxes(client, reference):
    data = (SAMPLE / NO_TEXT_PHOTO).read_bytes()
    assert len(reference(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)).detections) == 0
    for model in ("detect_dali", "detect_opencv"):
        out = client.infer(model, {"IMAGE": pack_images([data])}, ["BOXES", "SCORES"])
        assert out["BOXES"].shape == (1, 0, 4, 2) and out["SCORES"].shape == (1, 0), model


def test_any_subset_of_the_outputs_can_be_asked_for(client, photos):
    """BOXES alone (what a client of the detector asks for), the raw map alone: Triton's
    ensemble pruning must not drop a step a requested output needs (see detect_postprocess)."""
    data = photos[TEXT_CORPUS_PHOTOS[0]]
    everything = detect(client, "detect_opencv", data)
    for outputs in (["BOXES"], ["SCORES"], ["PROBABILITY"], ["GEOMETRY"], ["BOXES", "SCORES"]):
        out = detect(client, "detect_opencv", data, outputs)
        assert set(out) == set(outputs)
        for name in outputs:
            assert np.array_equal(out[name], everything[name]), name


def test_the_taps_answer_every_stage_and_the_geometry(client, photos, detection_spec):
    data = photos[TEXT_CORPUS_PHOTOS[0]]
    source = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2]
    geometry = detection_spec.preprocess.resize.geometry(*source)
    for model in (DETECTION.taps("dali"), DETECTION.taps("opencv")):
        out = detect(client, model, data, ["DECODED", "RESIZED", "CROPPED", "INPUT", "GEOMETRY"])
        assert out["DECODED"].shape == (*source, 3) and out["RESIZED"].shape == (*geometry.resized, 3), model
        assert out["CROPPED"].shape == (*geometry.input, 3) and out["INPUT"].shape == (3, *geometry.input), model
        assert Geometry.from_tensor(out["GEOMETRY"]) == geometry, model


def status_of(server, protocol: str, model: str, inputs: dict[str, np.ndarray]) -> tuple[str, str]:
    """(status, message) of a request the server refuses: HTTP's status code, gRPC's code."""
    if protocol == "http":
        body = {"inputs": [{"name": k, "shape": list(v.shape), "datatype": {"uint8": "UINT8", "float32": "FP32",
                                                                             "int32": "INT32"}[v.dtype.name],
                            "data": v.ravel().tolist()} for k, v in inputs.items()]}
        request = urllib.request.Request(f"http://{server.http_url}/v2/models/{model}/infer", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=60)
        return str(error.value.code), error.value.read().decode()
    import tritonclient.grpc as grpc
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, value in inputs.items():
        tensors.append(grpc.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype)))
        tensors[-1].set_data_from_numpy(value)
    with grpc.InferenceServerClient(server.grpc_url) as raw, pytest.raises(Exception) as error:
        raw.infer(model, tensors, client_timeout=60)
    return error.value.status(), error.value.message()


INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bad_image_is_invalid_argument_and_the_server_goes_on(server, protocol, photos):
    good = photos[TEXT_CORPUS_PHOTOS[0]]
    # a strip the limit-side resize (its longer side capped at max_side_limit) leaves no row of
    thin = cv2.imencode(".png", np.full((2, 3000, 3), 200, np.uint8))[1].tobytes()
    for model in ("detect_dali", "detect_opencv"):
        for bad, says in ((good[: len(good) // 2], "truncated JPEG"), (b"this is not an image", "not an image"),
                          (thin, "too thin")):
            status, message = status_of(server, protocol, model, {"IMAGE": np.frombuffer(bad, np.uint8)[None]})
            assert status == INVALID[protocol] and says in message, (model, message)
    with TritonClient(server.url(protocol), protocol) as client:
        assert len(detect(client, "detect_dali", good, ["SCORES"])["SCORES"]) >= 4


def test_a_bad_image_among_concurrent_good_ones_fails_only_itself(server, photos):
    """detect_validate_image keeps a bad image out of detect_preprocess_dali's batch (one bad
    image in a DALI batch fails every request of it)."""
    good, bad = photos[TEXT_CORPUS_PHOTOS[0]], b"\xff\xd8\xff\xe0 not a JPEG after all"

    def send(i: int) -> str:
        with TritonClient(server.url("grpc"), "grpc") as client:
            try:
                detect(client, "detect_dali", bad if i % 2 else good, ["SCORES"])
                return "served"
            except InferenceError:
                return "refused"

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(send, range(12)))
    assert answers == ["served", "refused"] * 6


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_detect_postprocess_alone_maps_a_map_and_refuses_a_malformed_one(server, protocol, expected):
    """detect_postprocess on the reference's own map and geometry gives the reference's boxes;
    a GEOMETRY that describes no resize, or a map the geometry's input cannot hold, is
    INVALID_ARGUMENT for that request only."""
    want = expected[TEXT_CORPUS_PHOTOS[0]]
    prob = want.probability.astype(np.float32)  # [1, 1, H, W]: one image's [1, H, W] map, batched
    geometry = want.geometry.to_tensor()[None]
    bad_geometries = {"a negative side": np.array([[600, 512, -864, 736, 0, 0, 0, 0]], np.int32),
                      "another input size": np.array([[600, 512, 432, 368, 0, 0, 0, 0]], np.int32)}
    for what, values in bad_geometries.items():
        status, message = status_of(server, protocol, DETECTION.postprocess_model,
                                    {"PROBABILITY": prob, "GEOMETRY": values})
        assert status == INVALID[protocol] and "GEOMETRY" in message, (what, message)
    with TritonClient(server.url(protocol), protocol) as client:
        out = client.infer(DETECTION.postprocess_model, {"PROBABILITY": prob, "GEOMETRY": geometry}, ["BOXES", "SCORES"])
    assert np.array_equal(out["BOXES"][0], want.detections.quads.astype(np.float32))
    assert np.array_equal(out["SCORES"][0], want.detections.scores.astype(np.float32))


def test_model_export_installs_the_detector_with_its_licence_notice(repository, tmp_path):
    """What `harness model export` does for the detector: rapidocr's file (the one its notice
    covers) with MODEL_LICENSES.md and LICENSE beside it, held to the detector's config."""
    from harness.detection.detector import MODEL_SHA256, sha256
    from harness.repository import load_config
    from harness.task.detection import install_detector

    (tmp_path / "detector").mkdir()
    shutil.copy(repository / "detector" / "config.pbtxt", tmp_path / "detector")
    path = install_detector(tmp_path / "detector", None, load_config(tmp_path / "detector" / "config.pbtxt"))
    assert path == tmp_path / "detector" / "model.onnx" and sha256(path) == MODEL_SHA256
    assert {p.name for p in path.parent.iterdir()} == {"config.pbtxt", "model.onnx", "MODEL_LICENSES.md", "LICENSE"}
