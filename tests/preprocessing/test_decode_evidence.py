"""Decode bounded by evidence (issue 35, defect 3): a file whose compressed data is far too
short for the size its header declares (a 700-byte JPEG declaring 13000x13000, whose scan holds
a 64x64 image) is refused by the one image check the served models (validate_image, the
preprocessing models) and the harness's reference share, with the reason, before any decoder
allocates the declared image (about 0.5 GB; 0.9 GB stayed allocated in the server before).
Real photos and legitimately flat images (a 4000x3000 flat colour at quality 1, progressive,
optimized; a flat PNG at deflate's best) all pass."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from harness.client import InferenceError
from harness.preflight.bad_images import png_with_size, with_size
from harness.preprocessing.image_check import ImageError, identify, validate
from tests.cli.test_serving_commands import harness
from tests.conftest import encode

SIDE = 13000


def jpeg_bomb() -> bytes:
    return with_size(encode(Image.new("RGB", (64, 64), (10, 200, 30)), "JPEG", quality=75), SIDE, SIDE)


def png_bomb() -> bytes:
    return png_with_size(encode(Image.new("RGB", (64, 64), (10, 200, 30)), "PNG"), SIDE, SIDE)


def test_a_jpeg_and_a_png_whose_data_cannot_hold_their_size_are_refused_with_the_reason():
    assert len(jpeg_bomb()) < 1000
    for level in ("header", "decode"):
        with pytest.raises(ImageError, match=r"JPEG data too short for its size: the header declares 13000x13000"):
            validate(jpeg_bomb(), level)
        with pytest.raises(ImageError, match=r"PNG data too short for its size: the header declares 13000x13000"):
            validate(png_bomb(), level)


@pytest.mark.parametrize("mode, colour", [("L", 128), ("RGB", (0, 0, 0)), ("RGB", (120, 130, 140))])
def test_flat_images_at_the_best_compression_pass(mode, colour):
    flat = Image.new(mode, (4000, 3000), colour)
    for options in ({"quality": 1}, {"quality": 1, "optimize": True}, {"quality": 1, "optimize": True, "progressive": True},
                    {"quality": 95, "subsampling": 0}):
        assert identify(encode(flat, "JPEG", **options)) == "JPEG"
    assert identify(encode(flat, "PNG", compress_level=9)) == "PNG"


def test_every_real_photo_passes(photos_dir):
    assert all(identify(p.read_bytes()) for p in sorted(photos_dir.iterdir()) if p.suffix.lower() in (".jpg", ".png"))


@pytest.mark.parametrize("pipeline", ["dali", "opencv"])
def test_the_server_refuses_it_per_request_and_serving_goes_on(client, photo, pipeline):
    for bomb, kind in ((jpeg_bomb(), "JPEG"), (png_bomb(), "PNG")):
        for call in (lambda: client.classify([bomb], pipeline), lambda: client.stages(bomb, pipeline)):
            with pytest.raises(InferenceError, match=f"{kind} data too short for its size"):
                call()
    assert client.classify([photo("baboon.jpg")], pipeline)[0][0].label == "baboon"


def test_a_check_row_names_the_reason_on_both_sides(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "bomb.jpg").write_bytes(jpeg_bomb())
    (images / "baboon.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes())
    result = harness("check", images, "--url", server.http_url, "--protocol", "http", "--report", tmp_path / "r",
                     "--no-isolate", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr  # rejected by both sides alike: no finding
    rows = {json.loads(line)["image"]: json.loads(line) for line in (tmp_path / "r" / "images.jsonl").read_text().splitlines()}
    error = rows["bomb.jpg"]["error"]
    assert error.count("JPEG data too short for its size") == 2 and error.startswith("reference:"), error
