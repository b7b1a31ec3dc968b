"""Samples, error types and the measurement window."""

import pytest

from harness.client import InferenceError
from harness.packing import pack_images
from loadtest.samples import PHOTO, Sample, WindowRecorder, error_type


def sample(end, latency=10.0, error=None, payload=PHOTO):
    return Sample(end=end, latency_ms=latency, response_bytes=100, payload=payload, error=error)


@pytest.mark.parametrize("message, fallback, expected", [
    ("in ensemble 'classify_dali', truncated JPEG: the file ends after 31155 bytes", "500", "truncated JPEG"),
    ("in ensemble 'classify_opencv', not an image: unrecognized file signature (first bytes 58 59)", "x",
     "not an image"),
    ("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.DEADLINE_EXCEEDED"),
    ("[Errno 111] Connection refused", "ConnectionRefusedError", "ConnectionRefusedError"),
    ("", "TimeoutError", "TimeoutError"),
    ("a very long sentence that explains something and only then has a colon: details", "500", "500"),
])
def test_error_type_is_the_reason_before_the_colon_or_the_fallback(message, fallback, expected):
    assert error_type(message, fallback) == expected


def test_error_types_of_the_real_server_messages(client, photo):
    """What the deployed ensembles answer to bad files is typed by the kind of badness."""
    data = photo("baboon.jpg")
    seen = {}
    for name, payload in {"truncated": data[: len(data) // 2], "garbage": b"XX" + data[2:]}.items():
        with pytest.raises(InferenceError) as failure:
            client.infer("classify_opencv", {"IMAGE": pack_images([payload])}, ["PROBABILITIES"], class_count=1)
        seen[name] = error_type(str(failure.value), "fallback")
    assert seen == {"truncated": "truncated JPEG", "garbage": "not an image"}


def test_sample_rows_round_trip():
    s = Sample(12.5, 3.25, 230, "truncated", "truncated JPEG")
    assert Sample.from_row(s.as_row()) == s
    assert not s.ok and sample(1.0).ok


def test_nothing_is_kept_outside_a_window():
    recorder = WindowRecorder()
    recorder.add([sample(1.0), sample(2.0)])
    assert recorder.count() == 0 and not recorder.complete
    recorder.open(10.0)
    recorder.add([sample(9.9), sample(10.0), sample(15.0)])  # 9.9: warm-up, dropped
    recorder.close(20.0)
    recorder.add([sample(19.0), sample(20.5)])  # late report of 19.0 kept; 20.5 after the window
    assert [s.end for s in recorder.samples] == [10.0, 15.0, 19.0]
    assert recorder.complete  # no workers to wait for


def test_reopening_starts_afresh():
    recorder = WindowRecorder()
    recorder.open(0.0)
    recorder.add([sample(1.0)])
    recorder.open(5.0)
    assert recorder.count() == 0 and recorder.end is None


def test_workers_results_are_complete_only_after_each_reports_past_the_end():
    recorder = WindowRecorder()
    recorder.open(100.0, sources=["w1", "w2"])
    recorder.add([sample(101.0)], source="w1", reported_at=103.0)
    recorder.close(110.0)
    assert not recorder.complete and recorder.missing_sources == ["w1", "w2"]
    recorder.add([sample(109.0)], source="w1", reported_at=111.0)
    assert not recorder.complete and recorder.missing_sources == ["w2"]
    recorder.add([sample(108.0), sample(112.0)], source="w2", reported_at=112.5)
    assert recorder.complete
    assert sorted(s.end for s in recorder.samples) == [101.0, 108.0, 109.0]


def test_close_without_open_is_an_error():
    with pytest.raises(RuntimeError):
        WindowRecorder().close(1.0)
