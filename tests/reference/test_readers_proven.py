"""The readers proven against each framework's own call: every Hugging Face image processor a
classifier user meets (as a local preprocessor_config.json) on both backends, every timm crop mode
and crop_pct (as a local pretrained_cfg), and OpenAI CLIP's RGB-conversion function. The spec's
replay (the harness's recipe) must give the framework's own output on real photos; what has no spec
operation is refused by name. No server."""

import json
import re

import pytest

from harness.reference import load_recipe
from harness.reference.frameworks import HF_PROCESSORS, NotReadable
from harness.reference.reading import prove, read_source, reading_recipe
from harness.spec import Spec, SpecError, to_table
from tests.reference.test_reading import TRAINING

PHOTOS = ["HappyFish.jpg", "grace_hopper.jpg", "fruits.jpg"]
"""Three shapes, none square (a squash read as a center crop, or a crop from the wrong side, shows)."""

IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


@pytest.fixture(scope="module")
def photos(photos_dir):
    return [(n, (photos_dir / n).read_bytes()) for n in PHOTOS]


def written(tmp_path, name: str, table: dict):
    """A model folder holding ``table`` as its ``name`` file (what a user downloads)."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps(table))
    return folder


def replayed(source, photos):
    """The reading of ``source`` and its proof: the spec's replay against the framework's own output."""
    reading = read_source(source)
    assert reading.own is not None and reading.read is not None, reading.refused or reading.missing
    return reading, prove(reading_recipe(reading), photos)


# -- Hugging Face -----------------------------------------------------------------------------------

HF_CONFIGS = {
    # each as its class's defaults, or as the hub's configs of well-known checkpoints write them
    "vit": {"image_processor_type": "ViTImageProcessor"},
    "deit": {"image_processor_type": "DeiTImageProcessor"},
    "beit": {"image_processor_type": "BeitImageProcessor", "size": 224, "resample": 2, "crop_size": 224,
             "do_center_crop": False, "do_reduce_labels": False},
    "resnet": {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 224}, "crop_pct": 0.875,
               **IMAGENET},  # microsoft/resnet-50's: ConvNext's processor, its crop_pct resize
    "convnext_0.95": {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 224},
                      "crop_pct": 0.95},
    "convnext_384": {"image_processor_type": "ConvNextImageProcessor"},  # from 384 a square warp
    "clip": {"image_processor_type": "CLIPImageProcessor"},
    "siglip": {"image_processor_type": "SiglipImageProcessor", "size": {"height": 224, "width": 224}},
    "efficientnet": {"image_processor_type": "EfficientNetImageProcessor", "size": {"height": 224, "width": 224},
                     "image_mean": [0.485, 0.456, 0.406], "image_std": [0.47853944, 0.4732864, 0.47434163],
                     "include_top": True},  # std divided twice
    "efficientnet_offset": {"image_processor_type": "EfficientNetImageProcessor", "rescale_offset": True,
                            "rescale_factor": 1 / 127.5, "include_top": False},
    "mobilenet_v1": {"image_processor_type": "MobileNetV1ImageProcessor"},
    "mobilenet_v2": {"image_processor_type": "MobileNetV2ImageProcessor", "size": {"shortest_edge": 256},
                     "crop_size": {"height": 224, "width": 224}},
    "bit": {"image_processor_type": "BitImageProcessor"},
    "levit": {"image_processor_type": "LevitImageProcessor"},
    "poolformer": {"image_processor_type": "PoolFormerImageProcessor"},
    "poolformer_warp": {"image_processor_type": "PoolFormerImageProcessor", "size": {"height": 224, "width": 192},
                        "crop_size": {"height": 200, "width": 160}},
    "poolformer_no_pct": {"image_processor_type": "PoolFormerImageProcessor", "crop_pct": None},
    "vit_size_divisor": {"image_processor_type": "ViTImageProcessor", "size_divisor": 32},  # a key ViT does not use
    "vit_do_pad": {"image_processor_type": "ViTImageProcessor", "do_pad": True},  # to the batch's largest: no-op
    "vit_pad_size": {"image_processor_type": "ViTImageProcessor", "do_pad": True, "pad_size": {"height": 224, "width": 224}},
    "old_feature_extractor": {"feature_extractor_type": "ConvNextFeatureExtractor", "size": 224},
}


@pytest.mark.parametrize("backend", ["torchvision", "pil"])
@pytest.mark.parametrize("case", HF_CONFIGS)
def test_every_classifier_processor_is_replayed_exactly_on_both_backends(tmp_path, photos, case, backend):
    folder = written(tmp_path, "preprocessor_config.json", HF_CONFIGS[case])
    reading, proof = replayed(f"hf:{folder}:{backend}", photos)
    assert proof.passed and proof.exact == len(PHOTOS), proof.line()


EFFICIENTNET_B0 = {**HF_CONFIGS["efficientnet"], "resample": 0}
"""google/efficientnet-b0's: NEAREST, which the two backends resize differently."""


def test_nearest_is_read_on_the_pil_backend_and_refused_on_torchvisions(tmp_path, photos):
    folder = written(tmp_path, "preprocessor_config.json", EFFICIENTNET_B0)
    reading, proof = replayed(f"hf:{folder}:pil", photos)
    assert proof.passed and proof.exact == len(PHOTOS), proof.line()
    reading = read_source(f"hf:{folder}")
    assert reading.read is None and reading.own is not None
    assert "resample 0 (NEAREST) on the torchvision backend: transformers resizes with torchvision's NEAREST_EXACT" \
        in reading.refused
    assert "not read as a spec" in prove(reading_recipe(reading), photos[:1]).line()


def test_what_each_processor_of_its_own_resize_is_read_as():
    """The sizes the classes' own resizes make, written out (ConvNext's crop_pct, LeViT's 256/224,
    PoolFormer's crop_pct, EfficientNet's second division by std)."""
    def read(case):
        return to_table(read_source_of(HF_CONFIGS[case]).preprocess)

    assert read("resnet")["resize"]["size"] == [256] and read("resnet")["crop"]["size"] == [224, 224]
    assert read("convnext_0.95")["resize"]["size"] == [235]  # int(224 / 0.95): 235.79 floored
    assert read("convnext_384")["resize"]["mode"] == "stretch" and read("convnext_384")["resize"]["size"] == [384, 384]
    assert read("levit")["resize"]["size"] == [256] and read("poolformer")["resize"]["size"] == [248]
    assert read("poolformer_warp")["resize"]["size"] == [248, 213] and read("poolformer_no_pct")["resize"]["size"] == [224]
    assert read("efficientnet")["normalize"]["std"] == pytest.approx([0.229, 0.224, 0.225], abs=1e-7)
    assert read("efficientnet_offset")["normalize"] == {"pixel_range": 2.0, "mean": [1.5] * 3, "std": [0.5] * 3}


def read_source_of(config: dict):
    from harness.reference.frameworks import read_hf

    return read_hf(config, "torchvision", "preprocessor_config.json")


def test_the_class_defaults_read_are_the_classes_own():
    """HF_PROCESSORS (read without transformers) holds each class's defaults as transformers 5.23 has them,
    on both backends."""
    import transformers

    for name, defaults in HF_PROCESSORS.items():
        for cls in (getattr(transformers, name), getattr(transformers, f"{name}Pil")):
            for key, value in defaults.items():
                assert getattr(cls, key) == value, f"{cls.__name__}.{key}"


@pytest.mark.parametrize("config, refused", [
    ({"size": {"shortest_edge": 224, "longest_edge": 300}, "do_center_crop": True}, "longest_edge bounds a side"),
    ({"size": {"max_height": 224, "max_width": 224}}, "max_height, max_width bounds a side"),
    ({"do_pad": True, "pad_size": {"height": 256, "width": 256}}, "do_pad with pad_size"),
    ({"do_resize": False}, "do_resize = false"),
    ({"resample": 5}, "resample 5 \\(HAMMING\\)"),
    ({"image_processor_type": "DetrImageProcessor"}, "DetrImageProcessor: its steps are its own code"),
    ({"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 224}, "crop_pct": None},
     "needs a crop_pct"),
])
def test_what_a_processor_does_without_a_spec_operation_is_refused_by_name(tmp_path, config, refused):
    folder = written(tmp_path, "preprocessor_config.json", {"image_processor_type": "ViTImageProcessor", **config})
    reading = read_source(f"hf:{folder}")
    assert reading.read is None and re.search(refused, reading.refused), reading.refused
    with pytest.raises(NotReadable, match=refused):
        reading.require()


def test_an_unknown_processor_class_is_one_line_naming_it_and_what_is_read(tmp_path):
    """Not transformers' message listing its 200 model types and naming the temporary folder it was given."""
    file = tmp_path / "my_processor.json"  # not preprocessor_config.json: transformers is given a copy elsewhere
    file.write_text(json.dumps({"image_processor_type": "SuperNetImageProcessor", "size": 224}))
    with pytest.raises(SpecError) as raised:
        read_source(f"hf:{file}")
    message = str(raised.value)
    assert "\n" not in message and "model_type" not in message, message
    assert "image_processor_type SuperNetImageProcessor: transformers 5.23.0 has no such processor class" in message
    assert "read as a spec: ViTImageProcessor" in message and "harness-hf-" not in message


# -- timm ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("crop_pct", [0.875, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("crop_mode, input_size", [("center", [3, 224, 224]), ("squash", [3, 224, 224]),
                                                   ("squash", [3, 192, 256])])
def test_every_timm_crop_mode_and_crop_pct_is_replayed_exactly(tmp_path, photos, crop_mode, input_size, crop_pct):
    cfg = {"input_size": input_size, "crop_pct": crop_pct, "crop_mode": crop_mode, "interpolation": "bicubic",
           "mean": [0.5] * 3, "std": [0.5] * 3}
    folder = written(tmp_path, "config.json", {"architecture": "a_model", "pretrained_cfg": cfg})
    reading, proof = replayed(f"timm:{folder}", photos)
    assert proof.passed and proof.exact == len(PHOTOS), proof.line()
    resize = to_table(reading.preprocess)["resize"]
    # the shorter side (or each side, squashed) is floor(size / crop_pct): 0.95 gives 235, not 236
    assert resize["mode"] == ("shorter_side" if crop_mode == "center" else "stretch")
    assert resize["size"] == [int(side / crop_pct) for side in input_size[1:]][:1 if crop_mode == "center" else 2]


def test_timms_border_crop_is_refused_by_name_and_compared_as_it_is(tmp_path, photos):
    folder = written(tmp_path, "config.json", {"pretrained_cfg": {"input_size": [3, 224, 224], "crop_mode": "border"}})
    reading = read_source(f"timm:{folder}")
    assert reading.read is None and reading.own is not None
    assert "crop_mode 'border': timm's ResizeKeepRatio and CenterCropOrPad (padding) holds no spec operation" in reading.refused
    assert "not read as a spec" in prove(reading_recipe(reading), photos[:1]).line()


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
