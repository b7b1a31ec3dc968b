"""The embedding task against real deployments: this repository's embed_dali on the real
embedded server (aligned, and with a planted preprocessing cause that check, diagnose and
accuracy each see), a foreign embedding deployment the tests write (its own names, BYTES
input), and the bad inputs: a task the model does not serve, a zero vector, NaN."""

import csv
import json
from pathlib import Path

import pytest

from harness.accuracy.job import AccuracyOptions
from harness.accuracy.job import run as run_accuracy
from harness.check.job import CheckOptions
from harness.check.job import run as run_check
from harness.diagnose.job import DiagnoseOptions
from harness.diagnose.job import run as run_diagnose
from harness.paths import PROJECT_ROOT
from harness.session import Session
from harness.stage import Stage
from harness.target import Target
from harness.verdict import Verdict
from tests.commands import harness
from tests.conftest import copy_photos
from tests.foreign import EMBEDDING_ENSEMBLE, TRAINING_SPEC, serve_foreign_embedding

PLANTED = PROJECT_ROOT / "specs" / "planted" / "antialias.toml"
IMAGENET = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample"
GROUPS = PROJECT_ROOT / "examples" / "retrieval" / "imagenet-sample-groups.csv"
SUBSET = 80
"""ImageNet photos the retrieval test scores (the report's measurement uses all 500)."""
FOREIGN = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "china.jpg", "board.jpg", "HappyFish.jpg",
           "aero3.jpg"]
EMBEDDING = Target(task="embedding")


def session(server, spec: Path | None = None) -> Session:
    return Session(spec_file=spec, url=server.url("grpc"))


def test_the_aligned_embedding_ensemble_passes_check_on_every_photo(server, photos_dir, tmp_path):
    result = run_check(session(server), CheckOptions(photos_dir, tmp_path, EMBEDDING))
    assert result.exit_status() == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["task"] == "embedding" and report["compared"] == 65 and report["deployed"]["ensemble"] == "embed_dali"
    verdicts = {s["name"]: s["verdict"] for s in report["stages"]}
    assert verdicts == {"decode": "equal", "resize": "close", "crop": "close", "input": "close", "output": "close",
                        "postprocess": "close"}
    assert all(e["verdict"] == "tie" for e in report["events"]) and report["task_figures"]["gallery"] == 65
    assert report["flips"] == [] and report["run"]["tie_margin"] == 0.01
    with (tmp_path / "per_image.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 65 and all(float(r["cosine"]) > 0.995 and r["postprocess_verdict"] == "close" for r in rows)
    markdown = (tmp_path / "report.md").read_text()
    assert "| postprocess | close |" in markdown and "Embeddings: cosine similarity worst" in markdown
    assert "`output` the raw embedding" in markdown


@pytest.fixture(scope="module")
def planted_images(photos_dir, tmp_path_factory):
    names = sorted(p.name for p in photos_dir.iterdir())[::4]  # 17 photos of every kind
    return copy_photos(photos_dir, names, tmp_path_factory.mktemp("planted"))


def test_a_planted_antialias_fails_at_resize_and_diagnose_names_it(server, planted_images, tmp_path):
    check = run_check(session(server, PLANTED), CheckOptions(planted_images, tmp_path / "check", EMBEDDING))
    summary = check.report.summary
    assert check.exit_status() == 1 and summary.first_divergent_stage is Stage.RESIZE
    assert summary.stage(Stage.POSTPROCESS).verdict is Verdict.DIVERGED
    assert summary.stage(Stage.POSTPROCESS).metric("cosine") < 0.995
    diagnosis = run_diagnose(session(server, PLANTED), DiagnoseOptions(planted_images, tmp_path / "diagnose", EMBEDDING))
    causes = [c.hypothesis.name for c in diagnosis.report.diagnosis.causes]
    assert causes == ["antialias off"] and diagnosis.report.diagnosis.remaining is None
    assert diagnosis.exit_status() == check.exit_status() == 1  # check's rule, on check's verdict
    text = (tmp_path / "diagnose" / "diagnosis.md").read_text()
    assert "nearest-neighbour changes" in text and "top-1" not in text


@pytest.fixture(scope="module")
def imagenet_subset(tmp_path_factory):
    if not GROUPS.is_file() or not IMAGENET.is_dir():
        pytest.skip("the ImageNet sample (../shared/datasets/imagenet-sample) is not here")
    rows = list(csv.reader(GROUPS.open()))[1:SUBSET + 1]
    path = tmp_path_factory.mktemp("groups") / "groups.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["file", "label"], *rows])
    return path


def test_accuracy_measures_the_retrieval_effect_of_a_planted_cause(server, imagenet_subset, tmp_path):
    options = AccuracyOptions(IMAGENET, tmp_path, imagenet_subset, ("dali",), task="embedding")
    planted = run_accuracy(session(server, PLANTED), options)
    aligned = run_accuracy(session(server), options)
    data = json.loads((tmp_path / "accuracy.json").read_text())  # the aligned run's, written last
    assert data["task"] == "embedding" and data["dataset"]["evaluated"] == SUBSET
    assert data["deployed"]["models"] == ["embed_dali"]
    reference, dali = data["effect"]["paths"]
    assert 0 < reference["recall@1"] <= reference["recall@5"] <= 1 and dali["mcnemar"] is not None
    moved, kept = planted.report.effect.paths[1], aligned.report.effect.paths[1]
    # Antialias planted moves more neighbours than the aligned preprocessing, and lowers their overlap.
    assert moved.neighbour_changes > kept.neighbour_changes and moved.neighbour_overlap < kept.neighbour_overlap
    assert planted.exit_status() == 1 and aligned.exit_status() == (1 if kept.neighbour_changes > kept.ties else 0)
    assert "| path | recall@1 | recall@5 | diff @1 | top-5 neighbour overlap |" in (tmp_path / "accuracy.md").read_text()


@pytest.fixture(scope="module")
def foreign_images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, FOREIGN, tmp_path_factory.mktemp("foreign"))


@pytest.fixture(scope="module")
def embedder(repository):
    return repository / "embedder" / "model.onnx"


@pytest.mark.server  # starts its own tritonserver
def test_a_foreign_embedding_deployment_through_model(foreign_images, embedder, tmp_path):
    """Its own names and a BYTES input; discovery finds the task from the output's name, and
    --task embedding says the same."""
    with serve_foreign_embedding(tmp_path / "repository", embedder) as server:
        for task in ([], ["--task", "embedding"]):
            report = tmp_path / f"report{len(task)}"
            result = harness("check", foreign_images, "--url", server.url("grpc"), "--model", EMBEDDING_ENSEMBLE,
                             *task, "--spec", TRAINING_SPEC, "--reference-model", embedder, "--report", report)
            assert result.returncode == 0, result.stdout + result.stderr
            data = json.loads((report / "report.json").read_text())
            assert data["task"] == "embedding" and data["deployed"]["deployment"]["scores"] == "vector_out"
            assert {s["name"]: s["verdict"] for s in data["stages"]} == {
                "crop": "equal", "input": "equal", "output": "equal", "postprocess": "equal"}
            assert "image_descriptor.descriptor -> output" in result.stdout
        # --task classification on it: refused, saying why, before any image is checked.
        refused = harness("check", foreign_images, "--url", server.url("grpc"), "--model", EMBEDDING_ENSEMBLE,
                          "--task", "classification", "--spec", TRAINING_SPEC, "--reference-model", embedder,
                          "--report", tmp_path / "refused")
        assert refused.returncode == 2
        assert "no output of class scores" not in refused.stderr  # it has one vector: not that reason
        assert "--task classification: photo_search answers an embedding, not class scores" in refused.stderr


def test_a_task_the_model_does_not_serve_is_refused_in_one_line(server, photos_dir, tmp_path):
    result = harness("check", photos_dir, "--url", server.url("grpc"), "--model", "classify_dali", "--task",
                     "embedding", "--report", tmp_path)
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if "--task embedding" in line]
    assert "classify_dali answers class scores, not an embedding: output LOGITS is named as class scores" in line
    assert "use --task classification" in line and not (tmp_path / "report.json").exists()


@pytest.mark.server  # starts its own tritonserver
def test_a_zero_vector_and_nan_are_their_images_divergences(foreign_images, embedder, tmp_path):
    """fruits.jpg answers a zero vector, HappyFish.jpg a NaN: each diverges, named, the other
    images are compared as usual, and the reports are written."""
    with serve_foreign_embedding(tmp_path / "repository", embedder, plant_zero_below=-0.5,
                                 plant_nan_above=1.0) as server:
        result = harness("check", foreign_images, "--url", server.url("http"), "--protocol", "http", "--model",
                         EMBEDDING_ENSEMBLE, "--spec", TRAINING_SPEC, "--reference-model", embedder, "--report",
                         tmp_path / "report")
    assert result.returncode == 1, result.stderr
    with (tmp_path / "report" / "per_image.csv").open() as f:
        rows = {r["image"]: r for r in csv.DictReader(f)}
    assert rows["fruits.jpg"]["postprocess_verdict"] == "diverged" and float(rows["fruits.jpg"]["zero_vector"]) == 1.0
    assert rows["HappyFish.jpg"]["output_verdict"] == "diverged" and rows["HappyFish.jpg"]["postprocess_verdict"] == "diverged"
    others = [r for name, r in rows.items() if name not in ("fruits.jpg", "HappyFish.jpg")]
    assert all(r["postprocess_verdict"] == "equal" for r in others)
    data = json.loads((tmp_path / "report" / "report.json").read_text())  # strict JSON: no bare NaN
    assert data["task_figures"]["gallery"] == len(FOREIGN) - 2  # the two have no direction to rank
    assert "Some embedding is a zero vector" in (tmp_path / "report" / "report.md").read_text()
