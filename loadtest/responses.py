"""What a load test's request counts as: a failure's type for Locust's failure table, and the
checks of an answer's shape (top-k classes of a classifier, one quad per score of a detector,
a matte and a mask of one size of a segmenter).

Free of Locust and gevent, so that anything (the tests, the harness) can import it without
gevent monkey-patching the importing process, as importing the locustfile does."""

from __future__ import annotations

TOP_K = 5
"""Each request asks for the top-5 classes (Triton's classification extension), as a
client of the classifier would; the answer is checked to hold them."""
DETECTION_RESULTS = ("BOXES", "SCORES")
"""A detector's answer (this repository's ``detect_*`` ensembles: ``get_task("detection").repository.results``
of :mod:`harness.client`, which the Locust image cannot import): a model with both outputs is
asked for them, without ``class_count``, and the answer is checked to hold one [4, 2] quad per
score (their number varies with the image, zero included)."""

OCR_TEXTS = "TEXTS"
"""An OCR model's words beside its boxes (this repository's ``ocr_*`` models: BYTES, one per
box): a model answering boxes and texts is asked for all three, and the answer is checked to
hold one text per box."""
SEGMENTATION_RESULTS = ("MATTE", "MASK")
"""A segmenter's answer (this repository's ``segment_*`` ensembles: ``get_task("segmentation").repository.results``):
a model with both outputs is asked for them, and the answer is checked to hold a matte and a
mask of one size."""


class RequestFailed(Exception):
    """A failed request as Locust sees it: its text is the error *type*, so Locust's failure
    table groups failures by type; the server's full message is in ``detail``."""

    def __init__(self, error: str, detail: str):
        super().__init__(error)
        self.error, self.detail = error, detail

    def __repr__(self) -> str:  # Locust names a failure by the exception's repr
        return self.error


def check_top_k(output: str, top) -> None:
    """:class:`RequestFailed` unless a classifier's answer holds :data:`TOP_K` classes."""
    if top is None or top.size != TOP_K:
        raise RequestFailed("bad response", f"{output} has shape {None if top is None else top.shape}, "
                                            f"expected {TOP_K} classes")


def check_texts(texts, scores) -> None:
    """:class:`RequestFailed` unless an OCR model's answer holds one text per box."""
    if texts is None or scores is None or texts.shape != scores.shape:
        raise RequestFailed("bad response", f"{OCR_TEXTS} has shape {None if texts is None else texts.shape}, "
                                            f"expected one text per box ({None if scores is None else scores.shape})")


def check_detections(boxes, scores) -> None:
    """:class:`RequestFailed` unless a detector's answer for one image holds one [4, 2] quad per
    score (batched or not)."""
    shapes = (None if boxes is None else boxes.shape, None if scores is None else scores.shape)
    if boxes is None or scores is None or boxes.shape[-2:] != (4, 2) or boxes.shape[:-2] != scores.shape:
        raise RequestFailed("bad response", f"{DETECTION_RESULTS[0]} and {DETECTION_RESULTS[1]} have shapes "
                                            f"{shapes[0]} and {shapes[1]}, expected [N, 4, 2] and [N]")


def check_mask(matte, mask) -> None:
    """:class:`RequestFailed` unless a segmenter's answer for one image holds a matte and a mask
    of the same [H, W] (batched or not)."""
    shapes = (None if matte is None else matte.shape, None if mask is None else mask.shape)
    if matte is None or mask is None or matte.shape != mask.shape or matte.ndim not in (2, 3) or 0 in matte.shape:
        raise RequestFailed("bad response", f"{SEGMENTATION_RESULTS[0]} and {SEGMENTATION_RESULTS[1]} have shapes "
                                            f"{shapes[0]} and {shapes[1]}, expected one [H, W] each")
