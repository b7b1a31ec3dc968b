import pytest

from harness.preprocessing.image_check import ImageError, identify, image_bytes
from tests.conftest import encode, random_bytes


def test_real_formats_are_identified(photo, squirrel_image):
    assert identify(photo("squirrel_cls.jpg")) == "JPEG"
    assert identify(encode(squirrel_image, "PNG")) == "PNG"
    assert identify(encode(squirrel_image, "BMP")) == "BMP"
    assert identify(encode(squirrel_image, "WEBP")) == "WebP"
    assert identify(encode(squirrel_image, "TIFF")) == "TIFF"


def test_padding_of_a_batched_request_is_ignored(photo):
    data = photo("baboon.jpg")
    assert image_bytes(data + b"\x00" * 1000) == data


@pytest.mark.parametrize("make, message", [
    (lambda p: b"", "empty image"),
    (lambda p: random_bytes(4000), "unrecognized file signature"),
    (lambda p: b"just some text\n" * 10, "looks like text"),
    (lambda p: p[: len(p) // 2], "truncated JPEG"),
    (lambda p: p[:400], "no start-of-scan"),
])
def test_bad_bytes_name_the_problem(photo, make, message):
    with pytest.raises(ImageError, match=message):
        identify(make(photo("squirrel_cls.jpg")))


def test_exif_thumbnail_end_marker_does_not_hide_truncation(squirrel_image):
    # A JPEG whose EXIF carries a thumbnail holds an early FF D9; cutting the main image
    # must still be reported as truncated.
    from PIL import Image

    thumb = encode(squirrel_image.resize((64, 48)), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 1
    full = encode(squirrel_image, "JPEG", exif=exif.tobytes() + b"", quality=90)
    with_thumb = full[:2] + b"\xff\xe1" + (len(thumb) + 2).to_bytes(2, "big") + thumb + full[2:]
    assert identify(with_thumb) == "JPEG"
    with pytest.raises(ImageError, match="truncated"):
        identify(with_thumb[: len(with_thumb) - 5000])
