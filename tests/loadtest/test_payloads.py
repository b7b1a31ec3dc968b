"""What the users send: photos in turn, and an exact share of bad payloads."""

import math

import pytest

from harness.preprocessing.image_check import ImageError, identify
from loadtest.payloads import BAD_PAYLOADS, PayloadSchedule, list_photos, not_an_image, truncated
from loadtest.samples import PHOTO


def test_photos_rotate_from_each_users_start():
    photos = [b"a", b"b", b"c"]
    schedule = PayloadSchedule(photos, start=1)
    assert [schedule.next() for _ in range(4)] == [(PHOTO, b"b"), (PHOTO, b"c"), (PHOTO, b"a"), (PHOTO, b"b")]


@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.25, 1 / 3])
@pytest.mark.parametrize("n", [1, 19, 20, 100, 997])
def test_exactly_floor_n_f_of_the_first_n_requests_are_bad(fraction, n):
    schedule = PayloadSchedule([b"\xff\xd8\xff photo"], bad_fraction=fraction)
    kinds = [schedule.next()[0] for _ in range(n)]
    bad = [k for k in kinds if k != PHOTO]
    assert len(bad) == math.floor(n * fraction)
    # The kinds take turns.
    assert bad == [list(BAD_PAYLOADS)[i % len(BAD_PAYLOADS)] for i in range(len(bad))]


def test_no_bad_payloads_by_default():
    schedule = PayloadSchedule([b"x"])
    assert {schedule.next()[0] for _ in range(1000)} == {PHOTO}


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 2.0])
def test_bad_fraction_out_of_range_is_refused(fraction):
    with pytest.raises(ValueError):
        PayloadSchedule([b"x"], bad_fraction=fraction)


def test_bad_payloads_are_bad_the_way_they_say(photos_dir):
    """Every photo of the corpus is a complete image; each bad kind breaks it as named."""
    for path in list_photos(photos_dir):
        data = path.read_bytes()
        identify(data)  # a good photo passes
        with pytest.raises(ImageError, match="truncated JPEG"):
            identify(truncated(data))
        with pytest.raises(ImageError, match="not an image"):
            identify(not_an_image(data))
        assert not_an_image(data) == not_an_image(data)  # reproducible


def test_list_photos_refuses_a_missing_or_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        list_photos(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no images"):
        list_photos(tmp_path)
