"""`harness accuracy`'s core against the real embedded server and the real model, on a
labeled set built from real photos and their re-encoded variants."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.accuracy import (
    REFERENCE,
    Dataset,
    DatasetError,
    Predictions,
    Sample,
    evaluate,
    load_dataset,
    mcnemar_exact,
    predict_deployed,
    predict_reference,
    render_markdown,
    report_dict,
)
from harness.client import TritonClient
from harness.corpus import VARIANTS, make_variants
from harness.model import read_labels
from harness.reference import load_recipe
from harness.reference.model import OnnxModel
from harness.spec import load_spec
from tests.conftest import copy_photos

LABELED_PHOTOS = {"squirrel_cls.jpg": "fox squirrel", "baboon.jpg": "baboon", "orange.jpg": "orange",
                  "messi5.jpg": "soccer ball", "grace_hopper.jpg": "military uniform"}
"""The corpus photos with a clear ImageNet class."""
PIPELINES = ("dali", "opencv")


def build_labeled_set(photos_dir, root):
    """ImageFolder layout: each labeled photo and its re-encoded variants in its class's directory."""
    for photo, label in LABELED_PHOTOS.items():
        class_dir = root / label
        class_dir.mkdir(parents=True)
        shutil.copy(photos_dir / photo, class_dir / photo)
        make_variants([photos_dir / photo], class_dir)
    return root


def write_bgr_spec(root, repository):
    """A spec saying training fed the model BGR while deployment feeds RGB (the classic port bug)."""
    (root / "model_repository").mkdir(parents=True, exist_ok=True)
    shutil.copy(repository / "preprocessing.toml", root / "model_repository" / "preprocessing.toml")
    (root / "specs").mkdir(exist_ok=True)
    spec = root / "specs" / "bgr.toml"
    spec.write_text('extends = "../model_repository/preprocessing.toml"\n\n[reference.input]\nchannel_order = "BGR"\n')
    return spec


@pytest.fixture(scope="module")
def classes(repository):
    return read_labels(repository / "classifier" / "labels.txt")


@pytest.fixture(scope="module")
def labeled_set(photos_dir, classes, tmp_path_factory):
    return load_dataset(build_labeled_set(photos_dir, tmp_path_factory.mktemp("labeled") / "set"), classes)


@pytest.fixture(scope="module")
def reference_model(repository):
    return OnnxModel(repository / "classifier" / "model.onnx")


@pytest.fixture(scope="module")
def deployed(server, labeled_set):
    """Both ensembles' predictions, asked of the server once: they do not depend on the reference's spec."""
    with TritonClient(server.grpc_url, "grpc") as client:
        return [predict_deployed(labeled_set.samples, client, pipeline) for pipeline in PIPELINES]


def score(spec, dataset, deployed, reference_model, classes):
    reference = predict_reference(dataset.samples, load_recipe(spec), reference_model)
    return evaluate(dataset, [reference, *deployed], classes)


def test_the_labeled_set_has_every_variant_of_every_photo(labeled_set):
    assert labeled_set.layout == "imagefolder" and labeled_set.labeled
    assert len(labeled_set.samples) == len(LABELED_PHOTOS) * (1 + len(VARIANTS))
    assert {s.name.split("/")[0] for s in labeled_set.samples} == set(LABELED_PHOTOS.values())


def test_aligned_deployment_scores_like_the_reference(spec, labeled_set, deployed, reference_model, classes):
    result = score(spec, labeled_set, deployed, reference_model, classes)
    assert not result.failed and len(result.evaluated) == len(labeled_set.samples)
    reference, *paths = result.scores
    assert [s.path for s in result.scores] == [REFERENCE, *PIPELINES]
    assert reference.top1 > 0.5  # the real model recognises most of these photos
    assert len(reference.per_class) == len(LABELED_PHOTOS)
    for path in paths:
        assert path.top1 == reference.top1 and path.top5 == reference.top5
        assert path.recall == reference.recall and path.precision == reference.precision
        assert path.flips == 0 and path.flip_rate == 0.0
        assert (path.mcnemar.b, path.mcnemar.c, path.mcnemar.p_value) == (0, 0, 1.0)


@pytest.mark.parametrize("spec_name", ["misaligned_resize", "channel_order_bgr"])
def test_a_misaligned_reference_flips_predictions(spec_name, repository, tmp_path, labeled_set, deployed,
                                                  reference_model, classes):
    path = (repository.parent / "specs" / "misaligned_resize.toml" if spec_name == "misaligned_resize"
            else write_bgr_spec(tmp_path, repository))
    result = score(load_spec(path), labeled_set, deployed, reference_model, classes)
    labels = np.array([s.label for s in result.evaluated])
    reference_top1 = np.array([result.predictions[REFERENCE][s.name][0] for s in result.evaluated])
    for path_score in result.scores[1:]:
        top1 = np.array([result.predictions[path_score.path][s.name][0] for s in result.evaluated])
        assert path_score.flips == np.sum(top1 != reference_top1) > 0
        assert path_score.flip_rate == path_score.flips / len(result.evaluated)
        m = path_score.mcnemar
        assert m.b == np.sum((reference_top1 == labels) & (top1 != labels))
        assert m.c == np.sum((reference_top1 != labels) & (top1 == labels))
    markdown = render_markdown(report_dict(result, classes, context()))
    assert "## Images whose top-1 class differs between paths" in markdown


def context():
    return {"reference": {"recipe": "recipe", "recipe_name": "opencv", "model": "onnx"},
            "deployed": {"url": "server", "protocol": "grpc"}, "spec": "spec.toml"}


def test_failed_images_are_listed_and_excluded_from_every_path(server, spec, photos_dir, reference_model, classes,
                                                              tmp_path):
    """A CSV dataset with a truncated JPEG, a text file and a missing file among real photos."""
    data = (photos_dir / "baboon.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])
    (tmp_path / "notes.txt").write_text("not a photo\n")
    copy_photos(photos_dir, ("baboon.jpg", "orange.jpg", "squirrel_cls.jpg"), tmp_path)
    (tmp_path / "labels.csv").write_text("file,label\nbaboon.jpg,baboon\ncut.jpg,372\norange.jpg,950\n"
                                         "notes.txt,orange\nmissing.jpg,orange\nsquirrel_cls.jpg,fox squirrel\n")
    dataset = load_dataset(tmp_path / "labels.csv", classes)
    assert dataset.layout == "csv" and [s.label for s in dataset.samples] == [372, 372, 950, 950, 950, 335]
    with TritonClient(server.grpc_url, "grpc") as client:
        predictions = [predict_reference(dataset.samples, load_recipe(spec), reference_model),
                       *(predict_deployed(dataset.samples, client, p, batch_size=4) for p in PIPELINES)]
    result = evaluate(dataset, predictions, classes)
    assert list(result.failed) == ["cut.jpg", "notes.txt", "missing.jpg"]
    assert set(result.outcomes.values()) == {"failed"}  # failed on every side: not a one-sided rejection
    for path in (REFERENCE, *PIPELINES):
        assert f"{path}: truncated JPEG" in result.failed["cut.jpg"]
        assert f"{path}: not an image" in result.failed["notes.txt"]
        assert f"{path}: file not found" in result.failed["missing.jpg"]
        assert set(result.predictions[path]) == {"baboon.jpg", "orange.jpg", "squirrel_cls.jpg"}
    report = report_dict(result, classes, context())
    assert report["dataset"]["images"] == 6 and report["dataset"]["evaluated"] == 3
    assert [f["image"] for f in report["failed"]] == ["cut.jpg", "notes.txt", "missing.jpg"]
    assert "## Failed images, excluded from every path (3)" in render_markdown(report)


def test_an_unlabeled_directory_gets_flip_rates_only(server, repository, photos_dir, reference_model, classes,
                                                     tmp_path):
    images = copy_photos(photos_dir, ("orange.jpg", "grace_hopper.jpg", "baboon.jpg"), tmp_path / "images")
    dataset = load_dataset(images, classes)
    assert dataset.layout == "unlabeled" and not dataset.labeled
    bgr = load_spec(write_bgr_spec(tmp_path, repository))
    with TritonClient(server.http_url, "http") as client:
        result = evaluate(dataset, [predict_reference(dataset.samples, load_recipe(bgr), reference_model),
                                    predict_deployed(dataset.samples, client, "dali")], classes)
    reference, dali = result.scores
    assert reference.top1 is None and dali.top1 is None and dali.mcnemar is None and dali.per_class == ()
    top1 = {path: [result.predictions[path][s.name][0] for s in result.evaluated] for path in (REFERENCE, "dali")}
    assert dali.flips == sum(a != b for a, b in zip(top1[REFERENCE], top1["dali"])) > 0
    row = next(line for line in render_markdown(report_dict(result, classes, context())).splitlines()
               if line.startswith("| `classify_dali`"))
    assert row.startswith("| `classify_dali` | - | - | - | - | - | - | - | - |") and f"({dali.flips}/3)" in row


# -- pure functions, hand-computed ----------------------------------------------------------

@pytest.mark.parametrize("b, c, p_value", [(1, 6, 0.125), (0, 6, 0.03125), (6, 0, 0.03125), (3, 2, 1.0), (0, 0, 1.0)])
def test_mcnemar_exact_matches_the_binomial_sum(b, c, p_value):
    # p = min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2^(b + c)); e.g. b=1, c=6: 2 * (1 + 7) / 128
    both_right, both_wrong = 4, 3
    reference = np.array([True] * both_right + [True] * b + [False] * c + [False] * both_wrong)
    deployed = np.array([True] * both_right + [False] * b + [True] * c + [False] * both_wrong)
    m = mcnemar_exact(reference, deployed)
    assert (m.b, m.c) == (b, c) and m.p_value == pytest.approx(p_value, abs=1e-12)


def test_evaluate_on_a_hand_computed_case():
    classes = ["cat", "dog", "fox", "owl", "elk", "yak"]
    labels = [0, 0, 0, 1, 1, 2, 2, 2, 1]
    samples = tuple(Sample(f"img{i}", Path(f"img{i}.jpg"), label) for i, label in enumerate(labels))
    reference_top1 = [0, 0, 1, 1, 1, 2, 0, 2, 1]
    dali_top1 = [0, 1, 0, 1, 0, 2, 2, 1]  # img8 failed on dali only
    reference = Predictions(REFERENCE, {s.name: (top, s.label, 3, 4, 5) for s, top in zip(samples, reference_top1)}, {})
    dali_top5 = {s.name: (top, s.label, 3, 4, 5) for s, top in zip(samples, dali_top1)}
    dali_top5["img4"] = (0, 2, 3, 4, 5)  # the label outside the top 5 once
    dali = Predictions("dali", dali_top5, {"img8": "corrupt JPEG"})
    result = evaluate(Dataset(Path("hand.csv"), "csv", samples), [reference, dali], classes)

    assert result.failed == {"img8": "dali: corrupt JPEG"}
    assert result.outcomes == {"img8": "rejected by deployment"} and result.rejected("deployment") == 1
    assert [s.name for s in result.evaluated] == [f"img{i}" for i in range(8)]
    assert set(result.predictions[REFERENCE]) == set(result.predictions["dali"]) == {f"img{i}" for i in range(8)}
    ref, dep = result.scores
    assert ref.top1 == 6 / 8 and ref.top5 == 1.0
    assert ref.recall == pytest.approx((2 / 3 + 1 + 2 / 3) / 3) and ref.precision == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert dep.top1 == 5 / 8 and dep.top5 == 7 / 8
    assert dep.recall == pytest.approx((2 / 3 + 1 / 2 + 2 / 3) / 3) and dep.precision == pytest.approx((2 / 3 + 1 / 3 + 1) / 3)
    assert [(c.name, c.images) for c in dep.per_class] == [("cat", 3), ("dog", 2), ("fox", 3)]
    assert dep.flips == 5 and dep.flip_rate == 5 / 8
    assert dep.ties == 0 and dep.diverged_flips == 5  # no reference logits: no margin, no tie
    assert (dep.mcnemar.b, dep.mcnemar.c, dep.mcnemar.p_value) == (3, 2, 1.0)
    report = report_dict(result, classes, context())
    assert report["paths"][1]["diff_points"]["top1"] == pytest.approx(-12.5)
    row = next(line for line in render_markdown(report).splitlines() if line.startswith("| `classify_dali`"))
    assert row == ("| `classify_dali` | 62.50% | -12.50 | 87.50% | -12.50 | 61.11% | -16.67 | 66.67% | -11.11 "
                   "| 62.50% (5/8) | 62.50% (5/8; 0 ties) | 3/2, p = 1 |")


def test_a_dataset_where_every_image_failed_is_reported_not_scored():
    samples = (Sample("a.jpg", Path("a.jpg"), 1), Sample("b.jpg", Path("b.jpg"), 2))
    reference = Predictions(REFERENCE, {}, {"a.jpg": "not an image", "b.jpg": "not an image"})
    dali = Predictions("dali", {"a.jpg": (1, 2, 3, 4, 5)}, {"b.jpg": "not an image"})
    result = evaluate(Dataset(Path("all_bad.csv"), "csv", samples), [reference, dali], ["x", "y", "z"])
    assert result.evaluated == () and list(result.failed) == ["a.jpg", "b.jpg"]
    assert all(s.top1 is None and s.flip_rate is None for s in result.scores)
    assert "## Failed images, excluded from every path (2)" in render_markdown(report_dict(result, ["x", "y", "z"], context()))


# -- datasets that cannot be read -----------------------------------------------------------

def test_an_unknown_class_directory_is_named(tmp_path, photos_dir, classes):
    for directory in ("fox-squirrel", "335", "crane"):
        (tmp_path / directory).mkdir()
        shutil.copy(photos_dir / "squirrel_cls.jpg", tmp_path / directory / "a.jpg")
    with pytest.raises(DatasetError) as error:
        load_dataset(tmp_path, classes)
    message = str(error.value)
    assert "'fox-squirrel' (directory 'fox-squirrel') is not a known class (did you mean 'fox squirrel'?)" in message
    assert "'crane' (directory 'crane') names 2 classes (indices 134, 517): use the index" in message
    assert "'335'" not in message  # an index is a label


def test_datasets_that_would_lose_images_are_refused(tmp_path, photos_dir, classes):
    (tmp_path / "orange").mkdir()
    shutil.copy(photos_dir / "orange.jpg", tmp_path / "orange" / "a.jpg")
    shutil.copy(photos_dir / "baboon.jpg", tmp_path / "loose.jpg")
    with pytest.raises(DatasetError, match="files outside them: loose.jpg"):
        load_dataset(tmp_path, classes)

    flat = copy_photos(photos_dir, ("orange.jpg", "baboon.jpg"), tmp_path / "flat")
    (tmp_path / "labels.csv").write_text("flat/orange.jpg,orange\n")
    with pytest.raises(DatasetError, match=r"1 image\(s\) of .*flat have no row in .*labels.csv: baboon.jpg"):
        load_dataset(flat, classes, tmp_path / "labels.csv")
    (tmp_path / "labels.csv").write_text("flat/orange.jpg,orange\nflat/baboon.jpg,baboon\n")
    assert [s.label for s in load_dataset(flat, classes, tmp_path / "labels.csv").samples] == [950, 372]

    (tmp_path / "bad.csv").write_text("file,label\nflat/orange.jpg,orange,extra\n")
    with pytest.raises(DatasetError, match=r"bad.csv, line 2: expected two columns file,label"):
        load_dataset(tmp_path / "bad.csv", classes)
    (tmp_path / "twice.csv").write_text("flat/orange.jpg,orange\nflat/orange.jpg,950\n")
    with pytest.raises(DatasetError, match="line 2: 'flat/orange.jpg' is already listed on line 1"):
        load_dataset(tmp_path / "twice.csv", classes)
    (tmp_path / "out_of_range.csv").write_text("flat/orange.jpg,1000\n")
    with pytest.raises(DatasetError, match=r"'1000' \(line 1\) is not a known class.*index 0-999"):
        load_dataset(tmp_path / "out_of_range.csv", classes)
