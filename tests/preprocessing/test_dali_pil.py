"""PIL's resize and torchvision's roundings replayed by the DALI graph (resize.resampling = "pil",
size_rounding floor, crop offsets half_even or floor), on real photos, against PIL and torchvision
themselves: the mechanism behind the frame of differing pixels, and its replay."""

import numpy as np
import pytest

from harness.preprocessing import PREPROCESS_STAGES
from harness.preprocessing.dali_graph import CpuPipelineRunner, missing_arguments, pipeline_arguments
from harness.reference.recipes import TorchRecipe, TorchvisionRecipe
from harness.spec import SpecError, parse_spec, with_overrides

# sharp-edged drawings (a cubic filter overshoots there) and photos of several sizes and aspects
PHOTOS = ["HappyFish.jpg", "LinuxLogo.jpg", "grace_hopper.jpg", "baboon.jpg", "ellipses.jpg", "butterfly.jpg"]


def stages(p, data):
    results = CpuPipelineRunner(p, max_batch_size=len(data), taps=True).run([np.frombuffer(d, np.uint8) for d in data])
    return [dict(zip(PREPROCESS_STAGES, r.outputs)) for r in results]


def training(interpolation="cubic", **resize):
    """A CLIP-like training preprocessing: shorter side 224 as torchvision rounds it, center crop."""
    return parse_spec({"decode": {"exif_orientation": False},
                       "resize": {"size": 224, "interpolation": interpolation, "antialias": True,
                                  "size_rounding": "floor", "resampling": "pil", **resize},
                       "crop": {"size": [224, 224], "offset_rounding": "half_even"},
                       "normalize": {"pixel_range": 1.0, "mean": [0.48, 0.46, 0.41], "std": [0.27, 0.26, 0.28]}}).preprocess


@pytest.mark.parametrize("recipe, interpolation", [(TorchvisionRecipe, "cubic"), (TorchvisionRecipe, "linear"),
                                                   (TorchRecipe, "cubic")])
def test_dali_replays_pils_resize_within_two_levels_where_its_own_is_far(photo, recipe, interpolation):
    p = training(interpolation)
    data = [photo(n) for n in PHOTOS]
    own = stages(with_overrides(p, resize={"resampling": "auto"}), data)
    for name, d, dali, plain in zip(PHOTOS, data, stages(p, data), own):
        reference = recipe(p)(d)  # PIL (torchvision on PIL), or torchvision v2 on uint8 tensors
        for stage in ("resize", "crop"):
            assert dali[stage].shape == reference[stage].shape, (name, stage)  # int() sizes, round() offsets
            error = np.abs(dali[stage] - reference[stage])
            assert error.max() <= 2 and (error > 1).mean() < 1e-4, (name, stage, error.max())
    worst = max(np.abs(plain["resize"] - recipe(p)(d)["resize"]).max() for d, plain in zip(data, own))
    assert worst >= 13  # DALI's own edges and float intermediate: the 13-22 levels measured


def test_a_float_resize_has_no_8bit_intermediate(photo):
    p = training("cubic", dtype="float32")
    data = [photo(n) for n in PHOTOS[:2]]
    for d, dali in zip(data, stages(p, data)):
        assert np.abs(dali["resize"] - TorchRecipe(p)(d)["resize"]).max() < 0.5


def test_torchvisions_roundings_in_the_graph(photo):
    """int() on the resized side and round() (half to even) or floor on the crop offsets, as the
    libraries compute them: a 640x480 photo at 224 is 224x298 (int(298.67); DALI's own: 299), and
    a 259x194 one 224x299, whose crop offset 37.5 is 38 (half to even) or 37 (floor)."""
    for offset_rounding, left in (("half_even", 38), ("floor", 37)):
        p = with_overrides(training("linear"), crop={"offset_rounding": offset_rounding}, resize={"resampling": "auto"})
        suzanne, fish = stages(p, [photo("Blender_Suzanne1.jpg"), photo("HappyFish.jpg")])
        assert suzanne["resize"].shape == TorchvisionRecipe(training("linear"))(photo("Blender_Suzanne1.jpg"))[
            "resize"].shape == (224, 298, 3)
        assert fish["resize"].shape == (224, 299, 3)
        assert np.array_equal(fish["crop"], fish["resize"][:, left:left + 224])


def test_the_production_graph_uses_only_arguments_of_the_pinned_dali():
    """The mixed (nvJPEG) graph with PIL's resampling and the roundings, defined without a GPU and
    serialized: every operator and argument is in DALI 2.1.1's schema (deploy/versions.toml)."""
    pipe = type("GpuRunner", (CpuPipelineRunner,), {"decoder": "mixed"}).define(training("lanczos"), 8)
    pipe.serialize()  # DALI checks each tensor argument (roi_start, roi_end, resize_x/_y) against its schema here
    arguments = pipeline_arguments(pipe)
    assert {"Resize", "Slice", "Cat"} <= set(arguments) and "roi_relative" in arguments["Resize"]
    assert missing_arguments(arguments) == []


def test_pil_resampling_needs_pils_filters():
    for resize in ({"antialias": False}, {"interpolation": "nearest"}, {"resampling": "lanczos3"}):
        with pytest.raises(SpecError, match="resampling"):
            parse_spec({"resize": {"antialias": True, "resampling": "pil", **resize}})
