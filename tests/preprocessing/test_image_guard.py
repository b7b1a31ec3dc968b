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
from harness.preprocessing.image_check import (
    MAX_DECODED_BYTES,
    MAX_JPEG_SCANS,
    MAX_PIXELS,
    MAX_PIXELS_PER_BYTE,
    MAX_PIXELS_WITHOUT_FLOOR,
    ImageError,
    inspect,
    validate,
)
from harness.reference import BUILT_IN
from harness.spec import load_spec
from tests.attack_files import (
    BOMBS,
    SIDE,
    bmp_rle8,
    flat_png,
    gif,
    jpeg2000,
    jpeg_arithmetic,
    jpeg_repeated_scans,
    pbm_packed,
    third_round,
    tiff_ccitt,
    webp_lossless,
)
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
    small = inspect(webp_lossless(190))  # 38 bytes, 190x190: within the ceiling and 1024 pixels a byte, decoded
    assert (small.kind, small.coding, small.width, small.decoded) == ("WebP", "lossless", 190, True)
    with pytest.raises(ImageError, match="image too large for its file: a 36-byte lossless WebP declaring 1000x1000"):
        inspect(webp_lossless(1000))  # passed before issue 58: 26,000 pixels a byte
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
            if (mode, fmt) == ("L", "TIFF"):  # refused by name (a grayscale TIFF: DALI's decoder reads none)
                flat = flat.convert("P")
            assert inspect(encode(flat, fmt, **options)).width == 2000, (mode, fmt, options)
    assert inspect(flat_png(2000, 8, 0)).width == 2000  # deflate's best, grey: 1,000 pixels a byte, within 1,024


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


def test_a_malformed_jpeg_2000_is_refused_before_opencv_sees_it(spec, photo_image):
    # OpenCV 4.11's JPEG 2000 decoder can crash its process (SIGSEGV) on this file's tile count
    # (375 x 375 tiles): in the server, the model instance's stub died ("Stub process ... is not
    # healthy", tests/serving/test_image_guard_served.py). 244 bytes for 9 megapixels: the bound
    # of pixels a byte refuses it now; a damaged one within that bound, Pillow's decoder refuses.
    with pytest.raises(ImageError, match="image too large for its file: a 244-byte wavelet JPEG 2000"):
        opencv.decode(jpeg2000(3000), spec.preprocess.decode)
    whole = encode(photo_image, "JPEG2000")
    with pytest.raises(ImageError, match="corrupt JPEG 2000: broken data stream"):
        opencv.decode(whole[:len(whole) // 2], spec.preprocess.decode)


def test_a_compressed_tiff_whose_file_ends_in_a_zero_byte_is_read_padded_as_the_decoders_read_it(photo_image):
    data = encode(photo_image, "TIFF", compression="tiff_lzw")
    assert data.endswith(b"\x00")  # Pillow writes the IFD's last array after the strips
    assert inspect(data).coding == "LZW" and inspect(data + bytes(10)).coding == "LZW"


def test_a_file_of_another_format_is_named():
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "GIF")
    with pytest.raises(ImageError, match="a GIF file: not a format the deployment takes .*DALI's decoder reads no GIF"):
        validate(buf.getvalue())


# -- the third round (issue 58): each refused by name from its header, in milliseconds ------------

WHY_THIRD = {
    "JPEG, 20,000 repeated AC scans": r"JPEG of 20010 scans: refused \(more than 256",
    "PNG, 1-bit": r"image too large for its file: a \d+-byte deflate PNG declaring 13000x13000 pixels, 8\d\d\d a byte",
    "PNG, 1-bit, interlaced": r"image too large for its file: a \d+-byte deflate PNG declaring 13000x13000",
    "PNG, 16-bit RGBA": "image too large decoded: its 8200x8200 RGBA pixels of 16-bit samples take 538 MB",
    "TIFF, 1-bit LZW": r"a bilevel or grayscale TIFF \(PIL mode 1\): refused \(DALI's decoder",
    "PBM, P1 without separators": r"a plain PNM whose last pixel value ends the file .*: refused \(DALI's decoder",
    "JPEG 2000, flat": r"image too large for its file: a \d+-byte wavelet JPEG 2000 declaring 1024x1024",
}


@pytest.fixture(scope="module")
def third(photos_dir):
    return third_round((photos_dir / "retina.jpg").read_bytes())


def test_the_third_rounds_files_are_refused_by_name_before_any_decoder(third, spec):
    assert set(third) == set(WHY_THIRD)
    for name, data in third.items():
        start = time.perf_counter()
        for level in ("header", "decode"):  # the scans cost validate() 7.9 s, the 1-bit PNG 1.5 s before
            with pytest.raises(ImageError, match=WHY_THIRD[name]):
                validate(data, level)
        with pytest.raises(ImageError, match=WHY_THIRD[name]):
            opencv.decode(data, spec.preprocess.decode)
        assert time.perf_counter() - start < 1, name


def test_the_limits_sit_where_the_decoders_and_real_files_are(photos_dir):
    photo = (photos_dir / "baboon.jpg").read_bytes()
    own = jpeg_repeated_scans(photo, 0).count(b"\xff\xda")  # libjpeg's progressive script
    assert own == 10 and MAX_JPEG_SCANS == 256  # nvImageCodec's NVIMGCODEC_MAX_JPEG_SCANS default
    assert inspect(jpeg_repeated_scans(photo, MAX_JPEG_SCANS - own)).coding == "Huffman"
    with pytest.raises(ImageError, match="JPEG of 257 scans"):
        inspect(jpeg_repeated_scans(photo, MAX_JPEG_SCANS - own + 1))
    assert MAX_PIXELS_PER_BYTE == 1024 and MAX_DECODED_BYTES == 3 * MAX_PIXELS
    assert inspect(flat_png(8190, 16, 6)).width == 8190  # 537 MB decoded: just within
    with pytest.raises(ImageError, match="5464 a byte"):  # a flat (blank) 1-bit page: refused
        inspect(flat_png(2000, 1, 0, interlaced=True))
    page = encode(Image.open(photos_dir / "fruits.jpg").convert("1"), "PNG")  # a dithered 1-bit photo: 3 pixels a byte
    assert inspect(page).mode == "1"


BILEVEL_AND_GREY = ("1", "L", "I;16")


def _tiff(image: Image.Image, mode: str, compression: str = "tiff_lzw") -> bytes:
    return encode(image.convert(mode), "TIFF", compression=compression)


def test_what_dalis_decoder_cannot_decode_is_refused_by_name_for_every_pipeline(photo_image, spec):
    """The guard's list is DALI's: the files it refuses by name fail in DALI's own decoder (called
    here without the guard), those beside them decode there; the OpenCV path refuses them too."""
    from harness.preprocessing.dali_graph import decode_images

    def decode_without_guard(data: bytes) -> np.ndarray:  # the served DALI graph's own decode, on a new pipeline
        return decode_images([data], spec.preprocess.decode, "cpu", None)[0]

    small = photo_image.resize((64, 48))
    refused = [_tiff(small, mode, compression) for mode in BILEVEL_AND_GREY for compression in ("raw", "tiff_lzw")]
    refused += [pbm_packed(64), b"P2\n64 48\n255\n" + b"17 " * (64 * 48 - 1) + b"17"]
    passed = [_tiff(small, mode) for mode in ("RGB", "RGBA", "P", "LA", "CMYK")] + [pbm_packed(64) + b"\n",
                                                                                  flat_png(64, 1, 0), flat_png(64, 16, 6)]
    for data in refused:
        with pytest.raises(ImageError, match="bilevel or grayscale TIFF|plain PNM whose last pixel value"):
            inspect(data)
        with pytest.raises(ImageError, match="bilevel or grayscale TIFF|plain PNM whose last pixel value"):
            opencv.decode(data, spec.preprocess.decode)
        with pytest.raises(RuntimeError, match="nvImageCodec failure|Failed to decode sample"):
            decode_without_guard(data)
    for data in passed:
        inspect(data)
        assert decode_without_guard(data).shape[2] == 3 and opencv.decode(data, spec.preprocess.decode).shape[2] == 3


def test_a_jpeg_of_any_sampling_is_validated_without_a_crash():
    # simplejpeg's header named no subsampling for a 1x4 luma (TurboJPEG's 4:4:1) and raised KeyError
    # out of validate(): in a served model, not a one-line refusal. TurboJPEG's decode names 3x1 none:
    # refused by name (the deployment's one-sided rejection in tests/test_rejections.py).
    from tests.attack_files import jpeg_grey_sampled

    assert validate(jpeg_grey_sampled(64, 48, 0x14)) == "JPEG"
    with pytest.raises(ImageError, match="corrupt JPEG: .*Could not determine subsampling"):
        validate(jpeg_grey_sampled(64, 48, 0x31))
