"""`harness diagnose` against deployed tensors read from the real server, on real photos."""

import pytest

from harness.cli.diagnose import fetch_deployed
from harness.client import TritonClient
from harness.compare.tolerance import tolerances_for
from harness.corpus import list_images
from harness.diagnose import Diagnoser, candidate_hypotheses, diagnose, resolve_auto
from harness.reference.model import OnnxModel, TorchModel
from harness.spec import load_spec
from tests.conftest import copy_photos

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "rocket.jpg", "grace_hopper.jpg",
          "china.jpg", "flower.jpg", "aero3.jpg"]
PLANTED = {  # spec -> (first divergent stage, culprit that must rank first)
    "channel_order": ("input", "channel order"),
    "antialias": ("resize", "resize antialias"),
    "normalization_scale": ("input", "normalization scale"),
    "stretch": ("resize", "resize mode"),
}


@pytest.fixture(scope="module")
def deployed(server, photos_dir):
    with TritonClient(server.grpc_url, "grpc") as client:
        return fetch_deployed(client, [photos_dir / n for n in PHOTOS], "dali")


@pytest.fixture(scope="module")
def model(repository):
    return OnnxModel(repository / "classifier" / "model.onnx")


def run(spec, deployed, model):
    diagnoser = Diagnoser(deployed, spec.reference.recipe, spec.reference.preprocess, spec.preprocess, model,
                          tolerances_for(spec.preprocess, spec.tolerances), lambda: TorchModel(half=True))
    hypotheses = candidate_hypotheses(spec.reference.recipe, diagnoser.reference, diagnoser.deployed_spec)
    return diagnose(diagnoser, hypotheses, "model_repository/preprocessing.toml", "DALI")


@pytest.mark.parametrize("planted", PLANTED)
def test_the_planted_cause_ranks_first_and_its_fix_works(repository, deployed, model, planted):
    spec = load_spec(repository.parent / "specs" / "planted" / f"{planted}.toml")
    stage, culprit = PLANTED[planted]
    result = run(spec, deployed, model)
    assert result.first_divergent == stage and result.baseline.diverged(stage) > 0
    best = result.ranked[0]
    assert best.culprit == culprit, [(e.name, e.culprit, e.status) for e in result.ranked[:3]]
    assert result.explained_by is best
    # the fix brings every stage up to the first divergent one back to equal or close
    assert best.diverged(stage) == 0 and best.verdicts[stage]["diverged"] == 0
    assert best.images == len(PHOTOS)
    assert result.recommendation and "Set " in result.recommendation


def test_recommendation_is_in_spec_terms_on_the_side_that_can_change(repository, deployed, model):
    antialias = run(load_spec(repository.parent / "specs" / "planted" / "antialias.toml"), deployed, model)
    assert antialias.recommendation.startswith("Set resize.antialias = true in the deployed spec")
    # torchvision's floor-rounded sizes: DALI cannot round that way, so training must change
    torchvision = run(load_spec(repository.parent / "specs" / "misaligned_resize.toml"), deployed, model)
    assert "Set resize.antialias = true" in torchvision.recommendation
    assert 'Train with resize.size_rounding = "half_up"' in torchvision.recommendation


def test_aligned_spec_has_no_dominant_cause(spec, deployed, model):
    result = run(spec, deployed, model)
    assert result.first_divergent is None and result.explained_by is None and result.recommendation is None
    assert "no dominant cause" in result.conclusion


def test_when_no_hypothesis_explains_it_says_so(repository, deployed, model):
    # The channel-order spec, searched without the channel-order hypothesis: nothing left
    # can explain it, and diagnose must say so instead of guessing.
    spec = load_spec(repository.parent / "specs" / "planted" / "channel_order.toml")
    diagnoser = Diagnoser(deployed, "opencv", spec.reference.preprocess, spec.preprocess, model,
                          tolerances_for(spec.preprocess), lambda: TorchModel(half=True))
    others = [h for h in candidate_hypotheses("opencv", diagnoser.reference, diagnoser.deployed_spec)
              if h.culprit != "channel order"]
    result = diagnose(diagnoser, others, "model_repository/preprocessing.toml", "DALI")
    assert result.first_divergent == "input" and result.explained_by is None and result.recommendation is None
    assert "nothing here explains it" in result.conclusion or "No known culprit fully explains" in result.conclusion


def test_a_reference_crop_the_classifier_cannot_take_is_a_clear_error(tmp_path, repository, model):
    from harness.reference.model import load_reference_model
    from harness.spec import SpecError

    odd = tmp_path / "odd.toml"
    odd.write_text(f'extends = "{repository / "preprocessing.toml"}"\n[reference.crop]\nsize = [216, 216]\n')
    reference_model = load_reference_model(repository / "classifier" / "model.onnx", "onnx")
    with pytest.raises(SpecError, match=r"\[3, 216, 216\] model inputs but the classifier takes \[3, 224, 224\]"):
        reference_model.check_input(load_spec(odd).reference.preprocess.input_shape)


def test_hypotheses_cover_the_known_culprits(spec):
    reference = resolve_auto("torchvision", spec.reference.preprocess)
    culprits = {h.culprit for h in candidate_hypotheses("torchvision", reference, spec.preprocess)}
    assert culprits >= {"channel order", "resize antialias", "resize interpolation", "resize library", "resize dtype",
                        "resize mode", "output-size rounding", "crop offset rounding", "normalization scale",
                        "normalization values", "JPEG chroma upsampling", "JPEG IDCT", "EXIF orientation",
                        "model precision"}
    assert reference.resize.size_rounding == "floor" and reference.crop.offset_rounding == "half_even"


def test_images_the_server_rejects_are_listed_not_dropped(server, photos_dir, tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    copy_photos(photos_dir, PHOTOS[:2], tmp_path)
    with TritonClient(server.grpc_url, "grpc") as client:
        got = fetch_deployed(client, list_images(tmp_path), "dali")
    assert sorted(got.names) == sorted(PHOTOS[:2]) and [f["image"] for f in got.failed] == ["bad.jpg"]
