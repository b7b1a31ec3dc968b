import pytest

from harness.spec import SpecError, load_spec, parse_spec, to_table, with_overrides


def test_repository_spec_is_the_aligned_default(spec):
    p = spec.preprocess
    assert p.resize.mode == "shorter_side" and p.resize.size == (256,) and not p.resize.antialias
    assert p.crop.size == (224, 224) and p.input_shape == (3, 224, 224)
    assert spec.reference.recipe == "opencv" and spec.reference.preprocess == p


def test_reference_overrides_only_the_keys_given():
    spec = parse_spec({"resize": {"size": 300}, "reference": {"recipe": "torchvision", "resize": {"antialias": True}}})
    assert spec.preprocess.resize.size == (300,) and not spec.preprocess.resize.antialias
    assert spec.reference.preprocess.resize.size == (300,) and spec.reference.preprocess.resize.antialias
    assert spec.reference.recipe == "torchvision"


def test_extends_merges_relative_to_the_file(tmp_path, repository):
    child = tmp_path / "child.toml"
    child.write_text(f'extends = "{repository / "preprocessing.toml"}"\n[input]\nchannel_order = "BGR"\n')
    spec = load_spec(child)
    assert spec.preprocess.input.channel_order == "BGR"
    assert spec.preprocess.normalize.mean == (127.0, 127.0, 127.0)


@pytest.mark.parametrize("table, message", [
    ({"resize": {"interpolation": "bilinear"}}, "resize.interpolation = 'bilinear'"),
    ({"resize": {"antialas": True}}, "unknown key(s) ['antialas'] in [resize]"),
    ({"crop": {"size": [300, 300]}}, "larger than the resized shorter side"),
    ({"normalize": {"std": [1, 0, 1]}}, "non-zero"),
    ({"resize": {"mode": "stretch", "size": [224, 224]}, "crop": {"size": [256, 256]}}, "larger than resize.size"),
    ({"color": {}}, "unknown section(s) ['color']"),
    ({"reference": {"recipe": "tensorflow"}}, "reference.recipe = 'tensorflow'"),
    ({"decode": {"hw_decoder_load": 1.5}}, "decode.hw_decoder_load = 1.5; expected a number from 0 to 1"),
    ({"decode": {"hw_decoder_load": True}}, "[decode] hw_decoder_load must be a finite number, got True"),
    ({"decode": {"hw_decoder_load": "off"}}, "[decode] hw_decoder_load must be a finite number, got 'off'"),
])
def test_bad_specs_name_the_problem(table, message):
    with pytest.raises(SpecError) as err:
        parse_spec(table)
    assert message in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[resize\n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)
    loop = tmp_path / "loop.toml"
    loop.write_text('extends = "loop.toml"\n')
    with pytest.raises(SpecError, match="loops"):
        load_spec(loop)


def test_sizes_and_offsets_round_half_up_like_dali(spec):
    resize, crop = spec.preprocess.resize, spec.preprocess.crop
    assert resize.output_size(480, 640) == (256, 341)      # 341.33
    assert resize.output_size(194, 259) == (256, 342)      # 341.77
    assert crop.offsets(256, 341) == (16, 59)              # 58.5 rounds up, not to even
    stretch = with_overrides(spec.preprocess, resize={"mode": "stretch", "size": [240, 320]})
    assert stretch.resize.output_size(1000, 10) == (240, 320)


def test_the_hand_written_crop_floors_its_offsets(spec):
    """Each rounding as its library computes it; DALI computes them all in the graph
    (tests/preprocessing/test_dali_pil.py), where it once refused all but half up."""
    from harness.preprocessing.dali_graph import check_supported

    roundings = {r: with_overrides(spec.preprocess, crop={"offset_rounding": r}).crop for r in ("half_up", "half_even", "floor")}
    assert {r: c.offsets(256, 341) for r, c in roundings.items()} == {"half_up": (16, 59), "half_even": (16, 58),
                                                                       "floor": (16, 58)}  # 58.5
    assert {r: c.offsets(259, 343) for r, c in roundings.items()} == {"half_up": (18, 60), "half_even": (18, 60),
                                                                       "floor": (17, 59)}  # (h - 224) // 2
    floored = with_overrides(spec.preprocess, resize={"size_rounding": "floor"}, crop={"offset_rounding": "floor"})
    assert floored.resize.output_size(480, 641) == (256, 341)  # int(641 * 256 / 480) = int(341.87)
    check_supported(floored)


def test_normalization_scales(spec):
    tv = with_overrides(spec.preprocess, normalize={"pixel_range": 1.0, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]})
    mean, std = tv.normalize.mean_std_in_pixels()
    assert mean == pytest.approx((127.5,) * 3) and std == pytest.approx((63.75,) * 3)


def test_to_table_round_trips(spec):
    assert parse_spec(to_table(spec.preprocess)).preprocess == spec.preprocess
    assert "hw_decoder_load" not in to_table(spec.preprocess)["decode"]  # DALI's default: no key (TOML has no null)
    off = parse_spec({"decode": {"hw_decoder_load": 0}}).preprocess
    assert off.decode.hw_decoder_load == 0.0 and parse_spec(to_table(off)).preprocess == off


def test_deployment_stages_for_a_discovered_deployment():
    from harness.spec import SpecError, parse_spec

    spec = parse_spec({"deployment": {"stages": {"jpeg_to_tensor": "crop", "prep.mask": "none"}}})
    assert spec.deployed_stages == {"jpeg_to_tensor": "crop", "prep.mask": "none"}
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['steps'\] in \[deployment\]"):
        parse_spec({"deployment": {"steps": {}}})
