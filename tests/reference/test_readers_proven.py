"""The readers proven against each framework's own call: OpenAI CLIP's RGB-conversion function. The
spec's replay (the harness's recipe) must give the framework's own output on real photos; what has no
spec operation is refused by name. No server."""

import pytest

from harness.reference import load_recipe
from harness.reference.reading import prove
from harness.spec import Spec
from tests.reference.test_reading import TRAINING

PHOTOS = ["HappyFish.jpg", "grace_hopper.jpg", "fruits.jpg"]
"""Three shapes, none square (a squash read as a center crop, or a crop from the wrong side, shows)."""


@pytest.fixture(scope="module")
def photos(photos_dir):
    return [(n, (photos_dir / n).read_bytes()) for n in PHOTOS]


# -- a function in a Compose: OpenAI CLIP's _convert_image_to_rgb ---------------------------------------

def test_clips_rgb_conversion_is_read_as_the_decode_and_the_reading_says_so(photos):
    recipe = load_recipe(Spec(), f"{TRAINING}:openai_clip")
    assert recipe.reading.read is not None, recipe.reading.refused
    assert recipe.reading.preprocess == load_recipe(Spec(), f"{TRAINING}:clip").reading.preprocess
    proof = prove(recipe, photos)
    assert proof.passed and proof.exact == len(PHOTOS), proof.line()
    said = "_convert_image_to_rgb read as the decode's RGB output (it is PIL's convert(\"RGB\") on images of every mode: 1, L"
    assert said in proof.line() and said in recipe.reading.framework
    assert "RGBA" in proof.line() and "CMYK" in proof.line() and "I;16" in proof.line()
    assert load_recipe(Spec(), f"{TRAINING}:clip_lambda").reading.read is not None  # the same step as a Lambda


def test_the_clip_reading_replays_files_that_are_not_rgb(tmp_path, photos):
    """Grey, palette, transparent and CMYK files: the Compose (its function converting them) and the spec's
    replay (the decode's RGB output) give the same input."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(photos[0][1]))
    files = []
    for mode, kind in (("L", "JPEG"), ("P", "PNG"), ("RGBA", "PNG"), ("CMYK", "JPEG")):
        converted = image.convert(mode)
        if mode == "RGBA":
            converted.putalpha(Image.linear_gradient("L").resize(image.size))
        out = io.BytesIO()
        converted.save(out, kind)
        files.append((f"{mode}.{kind.lower()}", out.getvalue()))
    proof = prove(load_recipe(Spec(), f"{TRAINING}:openai_clip"), files)
    assert proof.passed and proof.exact == len(files), proof.line()


def test_a_function_that_is_not_the_rgb_conversion_is_refused_naming_the_modes(photos):
    recipe = load_recipe(Spec(), f"{TRAINING}:clip_on_white")
    assert recipe.reading.read is None
    assert recipe.reading.refused == ("_rgb_on_white: no spec operation holds it: it is not PIL's convert(\"RGB\") "
                                      "(the decode's RGB output) on images of mode LA, PA, RGBA (other pixels)")
    assert "not read as a spec" in prove(recipe, photos[:1]).line()
