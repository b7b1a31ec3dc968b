import numpy as np
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


def test_validation_passes_every_format_the_decoders_read_padding_included(squirrel_image):
    from harness.preprocessing.image_check import validate

    image = np.asarray(squirrel_image).copy()
    image[:8] = 0  # black top rows: a BMP stores them last, so the file ends in zero bytes
    from PIL import Image

    for fmt in ("JPEG", "PNG", "BMP", "TIFF", "WEBP", "PPM"):
        data = encode(Image.fromarray(image), fmt)
        padded = np.frombuffer(data + bytes(1000), np.uint8)  # a row of a zero-padded batch
        for level in ("header", "decode"):
            assert validate(data, level) == validate(padded, level)


def test_validation_levels_name_what_they_catch(photo):
    from harness.preflight.bad_images import bad_images
    from harness.preprocessing.image_check import MAX_PIXELS, validate

    bad = bad_images(photo("squirrel_cls.jpg"))
    for name, message in [("truncated JPEG", "truncated JPEG"), ("text file", "looks like text"),
                          ("0x0 frame header", "corrupt JPEG header"),
                          ("65500x65500 frame header", f"65500x65500 pixels .* limit is {MAX_PIXELS / 1e6:.0f}")]:
        for level in ("header", "decode"):
            with pytest.raises(ImageError, match=message):
                validate(bad[name], level)
    # A broken Huffman table hides behind a sound header: only decoding finds it.
    assert validate(bad["bogus Huffman table"], "header") == "JPEG"
    with pytest.raises(ImageError, match="corrupt JPEG"):
        validate(bad["bogus Huffman table"], "decode")
