"""One tritonclient connection asking one model for its answer to a photo, over gRPC or HTTP:
what the Locust users (:mod:`loadtest.locustfile`) and ``harness watch`` (:mod:`loadtest.watch`)
send. Free of Locust and gevent (the locustfile makes gRPC use gevent before it is imported)."""

from __future__ import annotations

import json
from typing import Iterable

from loadtest.answers import KnownAnswers, photo_key
from loadtest.responses import (
    DETECTION_RESULTS,
    OCR_TEXTS,
    SEGMENTATION_RESULTS,
    TOP_K,
    RequestFailed,
    check_detections,
    check_mask,
    check_texts,
    check_top_k,
)
from loadtest.samples import error_type


def model_config(client, protocol: str, model: str) -> dict:
    """A model's config as JSON field names, over either protocol."""
    if protocol == "grpc":
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(client.get_model_config(model).config, preserving_proto_field_name=True)
    return client.get_model_config(model)


class TritonInferClient:
    """One tritonclient connection sending photos to one model; returns its answers and their sizes.

    How a photo goes in and which output holds the scores come from the model's config
    (:mod:`harness.deployment.discovery`), so any classification model can be loaded, and a
    detector (:data:`DETECTION_RESULTS`), and a segmenter (:data:`SEGMENTATION_RESULTS`);
    with ``client`` (``file.py:name``) the photo goes
    through the client's own preprocessing and its tensors are sent
    (:mod:`harness.deployment.client_side`)."""

    def __init__(self, protocol: str, url: str, timeout: float, model: str, client: str = ""):
        from harness.deployment.base import ImageRequest
        from harness.deployment.discovery import image_input, parse_config, scores_output

        self.protocol, self.timeout, self.model = protocol, timeout, model
        if protocol == "grpc":
            import tritonclient.grpc as module
            self.client = module.InferenceServerClient(url)
            options = {}
        else:
            import tritonclient.http as module
            self.client = module.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
            options = {"binary_data": True}
        self.module = module
        info = parse_config(model_config(self.client, protocol, model))
        if client:
            from harness.deployment.client_side import ClientRequest, load_client

            self.request = ClientRequest(model, client, load_client(client), info.inputs, info.batched)
        else:
            self.request = ImageRequest(model, image_input(info), info.batched)
        self.detector = set(DETECTION_RESULTS) <= {t.name for t in info.outputs}
        self.texts = self.detector and OCR_TEXTS in {t.name for t in info.outputs}  # an OCR model: its words too
        self.segmenter = set(SEGMENTATION_RESULTS) <= {t.name for t in info.outputs}
        if self.detector:
            self.outputs = [module.InferRequestedOutput(name, **options)
                            for name in (*DETECTION_RESULTS, *((OCR_TEXTS,) if self.texts else ()))]
        elif self.segmenter:
            self.outputs = [module.InferRequestedOutput(name, **options) for name in SEGMENTATION_RESULTS]
        else:
            self.output = scores_output(info, prefer="prob").name
            self.outputs = [module.InferRequestedOutput(self.output, class_count=TOP_K, **options)]

    def infer(self, data: bytes) -> tuple[int, dict]:
        """Send one file; returns the response's size in bytes and the answer (the outputs asked
        for, batch axis removed), raises on any failure."""
        from tritonclient.utils import np_to_triton_dtype

        request_inputs = []
        for name, tensor in self.request.inputs([data]).items():
            request_input = self.module.InferInput(name, list(tensor.shape), np_to_triton_dtype(tensor.dtype))
            request_input.set_data_from_numpy(tensor)
            request_inputs.append(request_input)
        if self.protocol == "grpc":
            result = self.client.infer(self.model, request_inputs, outputs=self.outputs, client_timeout=self.timeout)
            size = result.get_response().ByteSize()  # the serialized ModelInferResponse
        else:
            result = self.client.infer(self.model, request_inputs, outputs=self.outputs)
            response = result.get_response()
            # The body: Triton's compact JSON header, then the binary output data.
            size = len(json.dumps(response, separators=(",", ":"))) + sum(
                o.get("parameters", {}).get("binary_data_size", 0) for o in response.get("outputs", []))
        if self.detector:
            boxes, scores = (result.as_numpy(name) for name in DETECTION_RESULTS)
            check_detections(boxes, scores)
            answer = dict(zip(DETECTION_RESULTS, (boxes, scores)))
            if self.texts:
                answer[OCR_TEXTS] = result.as_numpy(OCR_TEXTS)
                check_texts(answer[OCR_TEXTS], scores)
            return size, {name: value[0] if self.request.batched else value for name, value in answer.items()}
        if self.segmenter:
            matte, mask = (result.as_numpy(name) for name in SEGMENTATION_RESULTS)
            check_mask(matte, mask)
            if self.request.batched:
                matte, mask = matte[0], mask[0]
            return size, dict(zip(SEGMENTATION_RESULTS, (matte, mask)))
        top = result.as_numpy(self.output)
        check_top_k(self.output, top)
        return size, {self.output: top.reshape(-1)}

    def close(self) -> None:
        self.client.close()


def as_request_failure(exc: Exception) -> RequestFailed:
    """Any exception of a request -> :class:`RequestFailed` carrying its error type."""
    if isinstance(exc, RequestFailed):
        return exc
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        message = exc.message() or ""
        fallback = str(exc.status()) if exc.status() else type(exc).__name__
    else:
        message, fallback = str(exc), type(exc).__name__
    return RequestFailed(error_type(message, fallback), message)




def record_answers(client: TritonInferClient, photos: Iterable[bytes]) -> tuple[KnownAnswers, list[RequestFailed]]:
    """Each photo's answer alone, one request at a time, by :func:`loadtest.answers.photo_key`;
    and the failures of the photos that got none."""
    answers, failures = {}, []
    for data in photos:
        try:
            answers[photo_key(data)] = client.infer(data)[1]
        except Exception as exc:
            failures.append(as_request_failure(exc))
    return KnownAnswers(answers), failures
