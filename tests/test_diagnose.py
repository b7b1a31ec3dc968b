"""`harness diagnose` against deployed tensors read from the real server, on real photos.

Single planted causes, and combinations of them (specs/planted/*+*.toml): every cause must be
named in one run, and their order by prediction cost must match what undoing each one alone
does to the predictions, measured here independently (recipe + model, no diagnose code)."""

import dataclasses

import numpy as np
import pytest

from harness.check.image import ImageChecker
from harness.client import TritonClient
from harness.compare.ties import default_tie_margin
from harness.compare.tolerance import tolerances_for
from harness.corpus import list_images
from harness.deployment import DeployedSide, TapsDeployment
from harness.deployment.side import RETRIES
from harness.diagnose import Diagnoser, candidate_hypotheses, diagnose, resolve_auto
from harness.diagnose.deployed import fetch_deployed
from harness.errors import ServerStopped
from harness.paths import DEFAULT_REPOSITORY
from harness.reference import BUILT_IN, load_recipe
from harness.reference.model import OnnxModel, TorchModel
from harness.server import TritonServer, free_port
from harness.spec import SPEC_FILENAME, load_spec, with_overrides
from harness.task import get_task
from tests.conftest import DALI_CHECK_MODELS, copy_photos

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "rocket.jpg", "grace_hopper.jpg",
          "china.jpg", "flower.jpg", "aero3.jpg"]
PLANTED = {  # spec -> (first divergent stage, culprit that must rank first)
    "channel_order": ("input", "channel order"),
    "antialias": ("resize", "resize antialias"),
    "normalization_scale": ("input", "normalization scale"),
    "stretch": ("resize", "resize mode"),
}
FIX = {  # planted cause -> the reference change that undoes it (what the deployment does)
    "channel_order": {"input": {"channel_order": "RGB"}},
    "antialias": {"resize": {"antialias": False}},
    "normalization_scale": {"normalize": {"pixel_range": 255.0}},
    "stretch": {"resize": {"mode": "shorter_side", "size": [256]}},
}
COMBINATIONS = {  # spec in specs/planted -> its planted causes
    "antialias+channel_order": ("antialias", "channel_order"),
    "stretch+normalization_scale": ("stretch", "normalization_scale"),
    "channel_order+normalization_scale": ("channel_order", "normalization_scale"),
    "stretch+channel_order": ("stretch", "channel_order"),
    "antialias+channel_order+normalization_scale": ("antialias", "channel_order", "normalization_scale"),
}
DEPLOYED_SPEC = "model_repository/preprocessing.toml"


def dali_checker(url: str, model, retries: int = RETRIES) -> ImageChecker:
    """Check of the repository's DALI pipeline through its taps model, against the aligned spec,
    as the diagnose command reads the deployed side."""
    spec = load_spec(DEFAULT_REPOSITORY / SPEC_FILENAME)
    side = DeployedSide(TapsDeployment("dali", get_task(None), spec.preprocess), lambda: TritonClient(url, "grpc"),
                        retries)
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    return ImageChecker(side, load_recipe(spec), model, tolerances, tie_margin=default_tie_margin(tolerances))


@pytest.fixture(scope="module")
def model(repository):
    return OnnxModel(repository / "classifier" / "model.onnx")


@pytest.fixture(scope="module")
def fetched(server, photos_dir, model):
    """The deployed stages of :data:`PHOTOS`, with check's verdict against the aligned spec."""
    return fetch_deployed(dali_checker(server.grpc_url, model), [photos_dir / n for n in PHOTOS])


@pytest.fixture(scope="module")
def deployed(fetched):
    """The deployed stages, for every spec of this module: check's verdict (the aligned spec's) left
    out, so that the search is tested on its own."""
    return dataclasses.replace(fetched, check=None)


def test_the_first_divergent_stage_is_checks_where_the_replay_disagrees(repository, fetched, model):
    """Issue 59 item 8: diagnose starts from check's verdict, not its own replay (issue 46). Check
    judged these photos against the aligned spec (nothing diverged); the replay of the antialias
    spec diverges at `resize`. The diagnosis's first stage is check's (none), and it searches
    nothing; taking the replay's, it would name `resize` and search it."""
    assert fetched.check is not None and fetched.check.first_divergent_stage is None
    result = run(planted_spec(repository, "antialias"), fetched, model)
    assert result.baseline.first_divergent() == "resize"  # the replay disagrees with check
    assert result.first_divergent is None and not result.rounds and not result.causes
    assert result.conclusion.startswith("No stage diverged")


def planted_spec(repository, name):
    return load_spec(repository.parent / "specs" / "planted" / f"{name}.toml")


def diagnoser_for(spec, deployed, model):
    tolerances = tolerances_for(spec.preprocess, spec.tolerances)
    return Diagnoser(deployed, spec.reference.recipe, spec.reference.preprocess, spec.preprocess, model,
                     tolerances, lambda: TorchModel(half=True), tie_margin=default_tie_margin(tolerances))


def run(spec, deployed, model, **kwargs):
    diagnoser = diagnoser_for(spec, deployed, model)
    try:
        return diagnose(diagnoser, DEPLOYED_SPEC, "DALI", **kwargs)
    finally:
        diagnoser.close()


def predictions(spec, causes_fixed, deployed, model) -> tuple[int, float]:
    """(top-1 flips, mean output RMSE) of the reference with the given planted causes fixed,
    computed directly: the recipe on every image, the model, the deployed logits."""
    overrides: dict = {}
    for cause in causes_fixed:
        for section, values in FIX[cause].items():
            overrides.setdefault(section, {}).update(values)
    recipe = BUILT_IN[spec.reference.recipe](with_overrides(spec.reference.preprocess, **overrides))
    logits = model.logits(np.stack([recipe(data)["input"] for data in deployed.data])).astype(np.float64)
    served = np.stack([stages["output"] for stages in deployed.stages]).astype(np.float64)
    flips = int(np.sum(logits.argmax(axis=1) != served.argmax(axis=1)))
    return flips, float(np.mean(np.sqrt(np.mean((logits - served) ** 2, axis=1))))


@pytest.mark.parametrize("planted", PLANTED)
def test_the_planted_cause_ranks_first_and_its_fix_works(repository, deployed, model, planted):
    stage, culprit = PLANTED[planted]
    result = run(planted_spec(repository, planted), deployed, model)
    assert result.first_divergent == stage and result.baseline.diverged(stage) > 0
    best = result.ranked[0]
    assert best.culprit == culprit, [(e.name, e.culprit, e.status) for e in result.ranked[:3]]
    # one cause, found in one round; with it nothing diverges
    assert [c.hypothesis for c in result.explained_by] == [best.hypothesis] and result.remaining is None
    assert best.diverged(stage) == 0 and best.verdicts[stage]["diverged"] == 0
    assert best.images == len(PHOTOS)
    assert result.recommendation and result.recommendation.startswith("Set ")
    assert f"**{best.name}** ({culprit}) explains it" in result.conclusion


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_every_planted_cause_is_named_and_ordered_by_its_cost(repository, deployed, model, combination):
    spec, planted = planted_spec(repository, combination), COMBINATIONS[combination]
    result = run(spec, deployed, model)

    assert result.remaining is None, result.conclusion  # with every cause applied, nothing diverges
    assert len(result.explained_by) == len(planted)
    everything = predictions(spec, planted, deployed, model)
    cost = {}
    for cause in planted:
        without = predictions(spec, [c for c in planted if c != cause], deployed, model)
        cost[cause] = (without[0] - everything[0], without[1] - everything[1])
    expected = sorted(planted, key=lambda c: cost[c], reverse=True)
    assert len(set(cost.values())) == len(planted), cost  # an order exists
    assert [c.hypothesis.culprit for c in result.causes] == [PLANTED[c][1] for c in expected], result.conclusion
    for found, cause in zip(result.causes, expected):
        assert found.flips == cost[cause][0]
        assert found.output_error == pytest.approx(cost[cause][1], rel=1e-6)
    # one recommendation covers every cause, most costly first
    lines = result.recommendation.splitlines()
    assert [line.split("**")[1] for line in lines[1:-1]] == [c.hypothesis.name for c in result.causes]
    assert lines[-1] == "With every change, nothing diverges."


def test_a_later_stage_cause_is_found_after_the_resize_one(repository, deployed, model):
    # The case: the resize difference comes first and costs no prediction; the channel
    # swap it used to leave for "run diagnose again" flips predictions and must rank first.
    result = run(planted_spec(repository, "antialias+channel_order"), deployed, model)
    assert [r.focus for r in result.rounds] == ["resize", "input"]
    assert [c.hypothesis.culprit for c in result.causes] == ["channel order", "resize antialias"]
    assert result.causes[0].flips > 0 and result.causes[1].flips == 0
    assert "run diagnose again" not in result.conclusion


def test_two_causes_at_one_stage_take_two_rounds(repository, deployed, model):
    result = run(planted_spec(repository, "channel_order+normalization_scale"), deployed, model)
    first, second = result.rounds[:2]
    assert first.focus == second.focus == "input"
    assert not first.explains and second.explains  # the first only improves, the second completes it


def test_the_round_bound_stops_the_search(repository, deployed, model):
    result = run(planted_spec(repository, "antialias+channel_order+normalization_scale"), deployed, model, max_rounds=1)
    assert len(result.rounds) == 1 and result.stopped == "round bound"
    assert [c.hypothesis.culprit for c in result.causes] == ["resize antialias"]
    assert result.remaining == "input" and "a divergence remains" in result.conclusion


def test_recommendation_is_in_spec_terms_on_the_side_that_can_change(repository, deployed, model):
    antialias = run(planted_spec(repository, "antialias"), deployed, model)
    assert antialias.recommendation.startswith("Set resize.antialias = true in the deployed spec")
    # torchvision's floor-rounded sizes: the DALI graph rounds that way too (computed in the graph), so the
    # deployed spec can follow training
    torchvision = run(load_spec(repository.parent / "specs" / "misaligned_resize.toml"), deployed, model)
    assert "Set resize.antialias = true" in torchvision.recommendation
    assert 'resize.size_rounding = "floor"' in torchvision.recommendation and "Train with" not in torchvision.recommendation
    assert torchvision.remaining is None  # the crop rounding it used to leave is found too
    assert {c.hypothesis.culprit for c in torchvision.causes} >= {"resize antialias", "output-size rounding"}


def test_aligned_spec_has_no_dominant_cause(spec, deployed, model):
    result = run(spec, deployed, model)
    assert result.first_divergent is None and not result.explained_by and result.recommendation is None
    assert "no dominant cause" in result.conclusion and not result.rounds and not result.causes


def test_when_no_hypothesis_explains_it_says_so(repository, deployed, model):
    # The channel-order spec, searched without the channel-order hypothesis: nothing left
    # can explain it, and diagnose must say so instead of guessing.
    def without_channel_order(*args):
        return [h for h in candidate_hypotheses(*args) if h.culprit != "channel order"]

    result = run(planted_spec(repository, "channel_order"), deployed, model, catalogue=without_channel_order)
    assert result.first_divergent == "input" and not result.explained_by and result.recommendation is None
    assert not result.causes and result.remaining == "input"
    # Noise is no cause: at most a candidate, below the thresholds, named so.
    assert "**no known culprit** explains it" in result.conclusion or "No known culprit fully explains" in result.conclusion


def test_hypotheses_are_screened_on_the_images_that_diverged_first(spec, server, photos_dir, model, tmp_path):
    """Issue 59 item 7: 8 photos upright, then 2 stored sideways with an EXIF orientation tag,
    against a reference that ignores the tag (PIL's open): only the last 2 diverge. Screened on
    the first 8 images, "EXIF orientation applied" improved nothing there and was rejected;
    screened on the diverged ones first, it explains the decode."""
    from PIL import Image

    from harness.corpus import _exif_rotated

    sideways = []
    for name in ("fruits.jpg", "orange.jpg"):
        sideways.append(tmp_path / f"sideways_{name}")
        sideways[-1].write_bytes(_exif_rotated(Image.open(photos_dir / name).convert("RGB")))
    paths = [photos_dir / n for n in PHOTOS if n not in ("fruits.jpg", "orange.jpg")] + sideways
    deployed = dataclasses.replace(fetch_deployed(dali_checker(server.grpc_url, model), paths), check=None)
    ignoring = dataclasses.replace(spec, reference=dataclasses.replace(
        spec.reference, preprocess=with_overrides(spec.reference.preprocess, decode={"exif_orientation": False})))
    diagnoser = diagnoser_for(ignoring, deployed, model)
    try:
        assert diagnoser.screening(diagnoser.baseline(), "decode")[:2] == [8, 9]  # the sideways ones lead
        result = diagnose(diagnoser, DEPLOYED_SPEC, "DALI")
    finally:
        diagnoser.close()
    assert result.first_divergent == "decode" and result.baseline.diverged("decode") == 2
    assert [c.hypothesis.culprit for c in result.explained_by] == ["EXIF orientation"], result.conclusion
    assert result.remaining is None


def test_a_reference_crop_the_classifier_cannot_take_is_a_clear_error(tmp_path, repository, model):
    from harness.reference.model import load_reference_model
    from harness.spec import SpecError

    odd = tmp_path / "odd.toml"
    odd.write_text(f'extends = "{repository / "preprocessing.toml"}"\n[reference.crop]\nsize = [216, 216]\n')
    reference_model = load_reference_model(repository / "classifier" / "model.onnx", "onnx")
    with pytest.raises(SpecError, match=r"\[3, 216, 216\] model inputs but the model takes \[3, 224, 224\]"):
        reference_model.check_input(load_spec(odd).reference.preprocess.input_shape)


def test_hypotheses_cover_the_known_culprits(spec):
    reference = resolve_auto("torchvision", spec.reference.preprocess)
    culprits = {h.culprit for h in candidate_hypotheses("torchvision", reference, spec.preprocess)}
    assert culprits >= {"channel order", "resize antialias", "resize interpolation", "resize library", "resize dtype",
                        "resize mode", "output-size rounding", "crop offset rounding", "normalization scale",
                        "normalization values", "JPEG chroma upsampling", "JPEG IDCT", "EXIF orientation",
                        "model precision"}
    assert reference.resize.size_rounding == "floor" and reference.crop.offset_rounding == "half_even"


def test_images_the_server_rejects_are_listed_not_dropped(server, photos_dir, tmp_path, model):
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    copy_photos(photos_dir, PHOTOS[:2], tmp_path)
    vanished = tmp_path / "vanished.jpg"  # listed, then gone before it is read
    got = fetch_deployed(dali_checker(server.grpc_url, model), [*list_images(tmp_path), vanished])
    assert sorted(got.names) == sorted(PHOTOS[:2])
    failed = {f.image: f for f in got.failed}
    assert failed["bad.jpg"].outcome == "failed"  # neither side reads it
    assert failed["vanished.jpg"].outcome == "failed" and failed["vanished.jpg"].reason.startswith("unreadable")
    # check's verdict on the same images, as check folds it: every entry a row
    assert got.check.compared == 2 and got.check.images == 4 and len(got.check.failed) == 2


def test_a_server_that_stops_ends_the_read_naming_it_and_the_image(cpu_repository, photos_dir, tmp_path, model):
    ports = dict(http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    server = TritonServer(cpu_repository, log_file=tmp_path / "t.log", models=DALI_CHECK_MODELS, **ports).start()
    seen = []

    def stop_after_two(name):
        seen.append(name)
        if len(seen) == 2:
            server.stop()

    try:
        with pytest.raises(ServerStopped, match="stopped answering at image") as stopped:
            fetch_deployed(dali_checker(server.grpc_url, model, retries=1), list_images(photos_dir)[:12], workers=1,
                           on_image=stop_after_two)
    finally:
        server.stop()
    assert server.grpc_url in str(stopped.value)
