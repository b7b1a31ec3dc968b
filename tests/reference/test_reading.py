"""--reference as users write their training: torchvision weights presets, Composes (v1, v2),
timm's pretrained_cfg and Hugging Face's preprocessor_config.json, read into the spec's
operations and proven against the framework's own output on real photos. No server."""

import re
import sys

import pytest

from harness.paths import PROJECT_ROOT
from harness.preprocessing import ImageError
from harness.reference import load_recipe
from harness.reference.frameworks import NotReadable, read_hf, read_timm
from harness.reference.reading import prove, read_source
from harness.spec import Spec, to_table

DEFINITIONS = PROJECT_ROOT / "tests" / "reference" / "definitions"
TRAINING = DEFINITIONS / "training.py"
VIT = DEFINITIONS / "vit"
CONVNEXT = DEFINITIONS / "convnext"
PHOTOS = ["HappyFish.jpg", "baboon.jpg", "grace_hopper.jpg", "Blender_Suzanne1.jpg"]


@pytest.fixture(scope="module")
def photos(photos_dir):
    return [(n, (photos_dir / n).read_bytes()) for n in PHOTOS]


def proven(source, photos):
    recipe = load_recipe(Spec(), source)
    return recipe, prove(recipe, photos)


@pytest.mark.parametrize("source, noun", [
    ("torchvision:ResNet50_Weights.IMAGENET1K_V2", "the weights' transforms"),
    (f"{TRAINING}:clip", "your Compose"),
    (f"{TRAINING}:tensors_v2", "your Compose"),
    (f"hf:{VIT}", "the processor"),
    (f"hf:{VIT}:pil", "the processor"),
    (f"timm:{CONVNEXT}", "timm's transforms"),
])
def test_each_definition_is_read_and_replayed_exactly_by_the_spec(photos, source, noun):
    recipe, proof = proven(source, photos)
    assert proof.passed and proof.exact == len(PHOTOS), proof.line()
    assert f"replays {noun} exactly on 4 of 4 photos" in proof.line()
    # what the spec's replay is compared with is the framework's own output, not the replay itself
    assert recipe.reading.own is not None and type(recipe).__name__ in ("ComposeRecipe", "CallableRecipe")


def test_what_was_read_for_a_clip_compose_and_a_vit_processor(photos):
    clip = to_table(load_recipe(Spec(), f"{TRAINING}:clip").reading.preprocess)
    assert clip["resize"] == {"mode": "shorter_side", "size": [224], "interpolation": "cubic", "antialias": True,
                              "dtype": "uint8", "size_rounding": "floor", "resampling": "pil"}
    assert clip["crop"] == {"size": [224, 224], "offset_rounding": "half_even"} and not clip["decode"]["exif_orientation"]
    assert clip["normalize"]["pixel_range"] == 1.0 and clip["normalize"]["mean"][0] == 0.48145466
    vit = read_source(f"hf:{VIT}")
    assert vit.read.recipe == "torch" and "torchvision backend (transformers 5's default" in vit.framework
    assert read_source(f"hf:{VIT}:slow").read.recipe == "torchvision"  # PIL's backend, its old name
    table = to_table(vit.preprocess)
    assert table["resize"]["mode"] == "stretch" and table["crop"]["offset_rounding"] == "floor"


def test_a_config_needs_no_framework(monkeypatch, photos):
    """Without transformers the config is read all the same; the report says it was not proven, and
    the spec's replay is the reference."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    recipe, proof = proven(f"hf:{VIT / 'preprocessor_config.json'}", photos)
    assert not proof.proven and "not proven on the photos: transformers is not installed" in proof.line()
    assert recipe.reading.own is None and recipe(photos[0][1])["input"].shape == (3, 224, 224)


def test_a_difference_is_said_with_its_stage_and_size(photos):
    """A reading the framework does not match (here a torchvision Compose whose replay is given other
    offsets) names the first stage that differs and by how much."""
    recipe = load_recipe(Spec(), f"{TRAINING}:clip")
    read = recipe.reading.read
    wrong = type(read)({**read.table, "crop": {"size": [224, 224], "offset_rounding": "floor"}}, read.recipe)
    recipe.reading = type(recipe.reading)(**{**vars(recipe.reading), "read": wrong})
    proof = prove(recipe, photos)
    assert not proof.passed and {d.stage for d in proof.differences} == {"crop"}
    assert "differs on" in proof.line() and "levels" in proof.line()


@pytest.mark.parametrize("name, refused", [
    ("augmented", "RandomResizedCrop is random"),
    ("with_lambda", "Lambda(<lambda>): no spec operation holds it: it is not PIL's convert"),
    ("normalized_pil", "Normalize on a PIL image"),
    ("bounded", "max_size=300"),
])
def test_what_no_operation_holds_is_refused_by_name_and_compared_as_it_is(photos, name, refused):
    recipe = load_recipe(Spec(), f"{TRAINING}:{name}")
    assert recipe.reading.read is None and refused in recipe.reading.refused
    assert "not read as a spec" in prove(recipe, photos).line()
    with pytest.raises(NotReadable, match=re.escape(refused)):
        recipe.reading.require()  # what deploy needs


@pytest.mark.parametrize("config, refused", [
    ({"crop_mode": "border"}, "crop_mode 'border'"),
    ({"interpolation": "random"}, "interpolation 'random'"),
    ({"input_size": [3, 224, 256]}, "non-square input_size"),
])
def test_timm_settings_without_an_operation_are_refused(config, refused):
    with pytest.raises(NotReadable, match=refused):
        read_timm({"input_size": [3, 224, 224], **config}, "config.json")


@pytest.mark.parametrize("config, refused", [
    ({"image_processor_type": "DetrImageProcessor"}, "DetrImageProcessor: its steps are its own code"),
    ({"do_pad": True, "pad_size": {"height": 256, "width": 256}}, "do_pad with pad_size"),
    ({"resample": 4}, "resample 4 \\(BOX\\)"),
    ({"size": {"longest_edge": 512}}, "longest_edge"),
    ({"image_processor_type": "CLIPImageProcessor", "do_center_crop": False}, "without do_center_crop"),
])
def test_hugging_face_settings_without_an_operation_are_refused(config, refused):
    with pytest.raises(NotReadable, match=refused):
        read_hf({"image_processor_type": "ViTImageProcessor", **config}, "torchvision", "preprocessor_config.json")


def test_a_class_default_fills_what_the_config_leaves_out():
    """An old CLIP config names only its class and size: the rest is the class's (bicubic, the crop, CLIP's mean)."""
    read = read_hf({"feature_extractor_type": "CLIPFeatureExtractor", "size": 224}, "pil", "preprocessor_config.json")
    table = to_table(read.preprocess)
    assert table["resize"]["interpolation"] == "cubic" and table["resize"]["mode"] == "shorter_side"
    assert table["crop"]["size"] == [224, 224] and table["normalize"]["mean"][0] == 0.48145466


def test_a_callable_taking_a_pil_image_gets_one_and_a_failure_says_what_it_was_given(photos):
    for name in ("preset", "annotated"):
        assert load_recipe(Spec(), f"{TRAINING}:{name}")(photos[0][1])["input"].shape == (3, 224, 224)
    with pytest.raises(ImageError, match="given the file's bytes: TypeError: Unexpected type <class 'bytes'> "
                                         "\\(a reference callable is given the file's bytes, unless it takes a PIL image"):
        load_recipe(Spec(), f"{TRAINING}:on_bytes")(photos[0][1])


def test_a_timm_model_name_is_resolved_by_timm():
    reading = read_source("timm:convnext_tiny.fb_in1k")
    assert reading.own is not None
    assert reading.preprocess == read_source(f"timm:{CONVNEXT}").preprocess


def test_a_source_that_is_not_there_is_one_line():
    from harness.spec import SpecError

    for source, message in (("torchvision:ResNet50_Weights.NOPE", "torchvision has no weights"),
                            ("hf:/no/such/folder", "not found"), ("timm:no_such_model_xyz", "timm knows no model")):
        with pytest.raises(SpecError, match=message):
            read_source(source)

