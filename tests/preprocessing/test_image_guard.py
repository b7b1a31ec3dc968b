"""The one image guard (issue 45): a decode bomb of every format and coding the decoders read
(tests/attack_files.py: a few hundred bytes declaring 13376 x 13376, the issue's size) is
refused by :func:`harness.preprocessing.image_check.inspect`, naming why, before any decoder
allocates; every path calls it (the OpenCV decode, the DALI runner, the reference recipes);
OpenCV's own guard holds the same limit; every real photo in every format and coding passes.
No server: the served models are tests/serving/test_image_guard_served.py."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from harness import MAX_IMAGE_PIXELS
from harness.preprocessing import opencv
from harness.preprocessing.image_check import MAX_PIXELS, MAX_PIXELS_WITHOUT_FLOOR, ImageError, inspect, validate
from harness.reference import BUILT_IN
from harness.spec import load_spec
from tests.attack_files import BOMBS, SIDE, bmp_rle8, gif, jpeg2000, jpeg_arithmetic, tiff_ccitt, webp_lossless
from tests.conftest import encode

WHY = {
    "JPEG (Huffman)": "JPEG data too short for its size",
    "JPEG (arithmetic)": "arithmetic-coded JPEG: refused",
    "JPEG (arithmetic, progressive)": "arithmetic-coded JPEG: refused",
    "PNG": "PNG data too short for its size",
    "WebP (lossless)": "image too large for its coding: a lossless WebP declaring 13376x13376",
    "WebP (lossy)": "WebP data too short for its size",
    "BMP (RLE8)": r"run-length encoded BMP \(RLE8\): refused",
    "BMP (RLE4)": r"run-length encoded BMP \(RLE4\): refused",
    "BMP (uncompressed)": "truncated BMP",
    "TIFF (deflate)": "TIFF data too short for its size.*deflate",
    "TIFF (LZW)": "TIFF data too short for its size.*LZW",
    "TIFF (PackBits)": "TIFF data too short for its size.*PackBits",
    "TIFF (uncompressed)": "truncated TIFF",
    "TIFF (CCITT G4)": "TIFF compressed with group4: refused",
    "GIF": "a GIF file: not a format the deployment takes",
    "JPEG 2000 (codestream)": "image too large for its coding: a wavelet JPEG 2000",
    "JPEG 2000 (JP2)": "image too large for its coding: a wavelet JPEG 2000",
    "PNM": "truncated PNM",
    "PNM (plain)": "PNM data too short for its size",
}


def test_the_limit_is_pillows_own():
    assert MAX_PIXELS == MAX_IMAGE_PIXELS == 2 * Image.MAX_IMAGE_PIXELS


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_of_every_format_is_refused_naming_why_before_any_decoder(name):
    bomb = BOMBS[name](SIDE)
    assert len(bomb) < 1200
    start = time.perf_counter()
    for level in ("header", "decode"):
        with pytest.raises(ImageError, match=WHY[name]):
            validate(bomb, level)
    with pytest.raises(ImageError, match=WHY[name]):
        opencv.decode(bomb + bytes(64), load_spec("model_repository/preprocessing.toml").preprocess.decode)
    assert time.perf_counter() - start < 5  # refused from the header, not decoded (0.5 GB each)


def test_what_has_no_floor_may_declare_little_and_is_decoded_by_pillow_first():
    assert MAX_PIXELS_WITHOUT_FLOOR == 4096 * 4096
    small = inspect(webp_lossless(1000))  # 38 bytes, 1000x1000: within the ceiling, decoded to be sure
    assert (small.kind, small.coding, small.width, small.decoded) == ("WebP", "lossless", 1000, True)
    with pytest.raises(ImageError, match="corrupt JPEG 2000"):  # Pillow refuses it: OpenCV would crash on it
        inspect(jpeg2000(3000))
    with pytest.raises(ImageError, match=f"image too large: the WebP header declares 14000x14000 .* limit is "
                                         f"{MAX_PIXELS / 1e6:.0f}"):
        inspect(webp_lossless(14000))


def test_refusals_by_name_need_no_size():
    for bomb, why in ((jpeg_arithmetic(8), "arithmetic-coded JPEG"), (bmp_rle8(8), "run-length encoded BMP"),
                      (tiff_ccitt(8), "TIFF compressed with group4"), (gif(8), "a GIF file")):
        with pytest.raises(ImageError, match=why):
            inspect(bomb)


@pytest.fixture(scope="module")
def photo_image(photos_dir):
    return Image.open(photos_dir / "baboon.jpg").convert("RGB")


ENCODINGS = [("PNG", {}), ("WEBP", {}), ("WEBP", {"lossless": True}), ("WEBP", {"quality": 0}), ("BMP", {}),
             ("TIFF", {}), ("TIFF", {"compression": "tiff_lzw"}), ("TIFF", {"compression": "tiff_adobe_deflate"}),
             ("TIFF", {"compression": "packbits"}), ("JPEG2000", {}), ("PPM", {}), ("JPEG", {"progressive": True})]


@pytest.mark.parametrize("fmt, options", ENCODINGS, ids=[f"{f}{o}" for f, o in ENCODINGS])
def test_a_photo_in_every_format_and_coding_passes_padded_or_not(photo_image, fmt, options):
    data = encode(photo_image, fmt, **options)
    for level in ("header", "decode"):
        assert validate(data, level) == validate(np.frombuffer(data + bytes(100), np.uint8), level)
    assert opencv.decode(data, load_spec("model_repository/preprocessing.toml").preprocess.decode).shape[:2] == \
        photo_image.size[::-1]


def test_flat_images_at_their_codings_best_compression_pass():
    for mode, colour in (("RGB", (10, 200, 30)), ("L", 255)):
        flat = Image.new(mode, (2000, 1500), colour)
        for fmt, options in (("WEBP", {"quality": 0, "method": 6}), ("WEBP", {"quality": 100}),
                             ("TIFF", {"compression": "tiff_lzw"}), ("TIFF", {"compression": "tiff_adobe_deflate"}),
                             ("TIFF", {"compression": "packbits"}), ("PNG", {"compress_level": 9})):
            assert inspect(encode(flat, fmt, **options)).width == 2000, (mode, fmt, options)


def test_the_reference_recipes_refuse_what_the_deployment_refuses(spec):
    for name in ("opencv", "torchvision", "dali"):
        recipe = BUILT_IN[name](spec.preprocess)
        for kind in ("WebP (lossless)", "JPEG (arithmetic)", "BMP (RLE8)", "TIFF (deflate)"):
            with pytest.raises(ImageError, match=WHY[kind]):
                recipe(BOMBS[kind](SIDE))


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_opencvs_own_guard_holds_the_same_limit_in_every_process_of_the_harness():
    # cv2 imported after the harness, as in the commands and the server's models: cv2.imdecode
    # itself refuses 14000x14000 (the guard is not called here), where it decoded 588 MB.
    done = _run("import harness, cv2, numpy as np, os; from tests.attack_files import webp_lossless\n"
                "print(os.environ['OPENCV_IO_MAX_IMAGE_PIXELS'])\n"
                "try:\n    print(cv2.imdecode(np.frombuffer(webp_lossless(14000), np.uint8), cv2.IMREAD_COLOR).shape)\n"
                "except cv2.error as exc:\n    print('refused', 'CV_IO_MAX_IMAGE_PIXELS' in str(exc))")
    assert done.stdout.split() == [str(MAX_PIXELS), "refused", "True"], done.stdout + done.stderr[-2000:]


def test_a_malformed_jpeg_2000_is_refused_by_pillow_before_opencv_sees_it(spec):
    # OpenCV 4.11's JPEG 2000 decoder can crash its process (SIGSEGV) on this file's tile count
    # (375 x 375 tiles): in the server, the model instance's stub died ("Stub process ... is not
    # healthy", tests/serving/test_image_guard_served.py); Pillow's decoder refuses it cleanly.
    with pytest.raises(ImageError, match="corrupt JPEG 2000: broken data stream"):
        opencv.decode(jpeg2000(3000), spec.preprocess.decode)


def test_a_compressed_tiff_whose_file_ends_in_a_zero_byte_is_read_padded_as_the_decoders_read_it(photo_image):
    data = encode(photo_image, "TIFF", compression="tiff_lzw")
    assert data.endswith(b"\x00")  # Pillow writes the IFD's last array after the strips
    assert inspect(data).coding == "LZW" and inspect(data + bytes(10)).coding == "LZW"


def test_a_file_of_another_format_is_named():
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "GIF")
    with pytest.raises(ImageError, match="a GIF file: not a format the deployment takes .*DALI's decoder reads no GIF"):
        validate(buf.getvalue())
