"""`harness accuracy`'s core against the real embedded server and the real model, on a
labeled set built from real photos and their re-encoded variants (the server-free parts:
tests/accuracy/)."""

import shutil

import numpy as np
import pytest

from harness.accuracy import REFERENCE, evaluate, load_dataset, predict_deployed, predict_reference, render_markdown
from harness.client import TritonClient
from harness.corpus import VARIANTS, make_variants
from harness.deployment import pipeline_side
from harness.model import read_labels
from harness.reference import load_recipe
from harness.reference.model import OnnxModel
from harness.spec import load_spec
from harness.task import get_task
from tests.accuracy.test_scoring import report
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
        return [predict_deployed(labeled_set.samples, pipeline_side(client, pipeline, get_task(None))) for pipeline in PIPELINES]


def predict(spec, dataset, deployed, reference_model):
    return [predict_reference(dataset.samples, load_recipe(spec), reference_model), *deployed]


def score(spec, dataset, deployed, reference_model, classes):
    return evaluate(dataset, predict(spec, dataset, deployed, reference_model), classes)


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
        assert path.top1 == reference.top1 and path.topk == reference.topk
        assert path.recall == reference.recall and path.precision == reference.precision
        assert path.flips == 0 and path.flip_rate == 0.0
        assert (path.mcnemar.b, path.mcnemar.c, path.mcnemar.p_value) == (0, 0, 1.0)


@pytest.mark.parametrize("spec_name", ["misaligned_resize", "channel_order_bgr"])
def test_a_misaligned_reference_flips_predictions(spec_name, repository, tmp_path, labeled_set, deployed,
                                                  reference_model, classes):
    path = (repository.parent / "specs" / "misaligned_resize.toml" if spec_name == "misaligned_resize"
            else write_bgr_spec(tmp_path, repository))
    predictions = predict(load_spec(path), labeled_set, deployed, reference_model)
    result = evaluate(labeled_set, predictions, classes)
    labels = np.array([s.label for s in result.evaluated])
    reference_top1 = np.array([result.predictions[REFERENCE][s.name][0] for s in result.evaluated])
    for path_score in result.scores[1:]:
        top1 = np.array([result.predictions[path_score.path][s.name][0] for s in result.evaluated])
        assert path_score.flips == np.sum(top1 != reference_top1) > 0
        assert path_score.flip_rate == path_score.flips / len(result.evaluated)
        m = path_score.mcnemar
        assert m.b == np.sum((reference_top1 == labels) & (top1 != labels))
        assert m.c == np.sum((reference_top1 != labels) & (top1 == labels))
    markdown = render_markdown(report(labeled_set, predictions, classes))
    assert "## Images whose top-1 class differs between paths" in markdown


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
                       *(predict_deployed(dataset.samples, pipeline_side(client, p, get_task(None)),
                                          batch_size=4) for p in PIPELINES)]
    result = evaluate(dataset, predictions, classes)
    assert list(result.failed) == ["cut.jpg", "notes.txt", "missing.jpg"]
    assert set(result.outcomes.values()) == {"failed"}  # failed on every side: not a one-sided rejection
    for path in (REFERENCE, *PIPELINES):
        assert f"{path}: truncated JPEG" in result.failed["cut.jpg"]
        assert f"{path}: not an image" in result.failed["notes.txt"]
        assert f"{path}: file not found" in result.failed["missing.jpg"]
        assert set(result.predictions[path]) == {"baboon.jpg", "orange.jpg", "squirrel_cls.jpg"}
    written = report(dataset, predictions, classes)
    data = written.to_dict()
    assert data["dataset"]["images"] == 6 and data["dataset"]["evaluated"] == 3
    assert [f["image"] for f in data["failed"]] == ["cut.jpg", "notes.txt", "missing.jpg"]
    assert "## Failed images, excluded from every path (3)" in render_markdown(written)


def test_an_unlabeled_directory_gets_flip_rates_only(server, repository, photos_dir, reference_model, classes,
                                                     tmp_path):
    images = copy_photos(photos_dir, ("orange.jpg", "grace_hopper.jpg", "baboon.jpg"), tmp_path / "images")
    dataset = load_dataset(images, classes)
    assert dataset.layout == "unlabeled" and not dataset.labeled
    bgr = load_spec(write_bgr_spec(tmp_path, repository))
    with TritonClient(server.http_url, "http") as client:
        predictions = [predict_reference(dataset.samples, load_recipe(bgr), reference_model),
                       predict_deployed(dataset.samples, pipeline_side(client, "dali", get_task(None)))]
    result = evaluate(dataset, predictions, classes)
    reference, dali = result.scores
    assert reference.top1 is None and dali.top1 is None and dali.mcnemar is None and dali.per_class == ()
    top1 = {path: [result.predictions[path][s.name][0] for s in result.evaluated] for path in (REFERENCE, "dali")}
    assert dali.flips == sum(a != b for a, b in zip(top1[REFERENCE], top1["dali"])) > 0
    row = next(line for line in render_markdown(report(dataset, predictions, classes)).splitlines()
               if line.startswith("| `classify_dali`"))
    assert row.startswith("| `classify_dali` | - | - | - | - | - | - | - | - |") and f"({dali.flips}/3)" in row
