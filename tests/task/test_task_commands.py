"""``--task embedding`` on the other commands that read the server, against the real embedded
server: infer (each image's nearest among the others), compare (the runs' task, refused when
they differ), repeat (the embed ensemble and the embedder) and preflight (their models ready)."""

import json

import pytest
from PIL import Image

from harness.client import TritonClient
from harness.layers.repeatability import check_repeatability, repository_probes
from harness.manifest import load_manifest
from harness.preflight import PASS, server_rows
from harness.session import Session
from tests.commands import harness
from tests.conftest import copy_photos, encode
from tests.layers.test_repeatability import drift

FEW = ["squirrel_cls.jpg", "baboon.jpg", "orange.jpg"]


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    """Three photos and the squirrel again, re-encoded at quality 60: its nearest is the squirrel."""
    directory = copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("few"))
    with Image.open(photos_dir / "squirrel_cls.jpg") as image:
        (directory / "squirrel_again.jpg").write_bytes(encode(image.convert("RGB"), quality=60))
    return directory


def test_infer_names_each_images_nearest_among_the_others(server, images, tmp_path):
    (tmp_path / "notes.txt").write_text("not a photo\n")
    result = harness("infer", *sorted(images.iterdir()), tmp_path / "notes.txt", "--url", server.grpc_url, "--task",
                     "embedding", "--top-k", "1")
    assert result.returncode == 1, result.stderr  # the text file: its failed row
    rows = {line.split("│")[1].strip(): line.split("│")[2].split() for line in result.stdout.splitlines()
            if line.count("│") == 3 and line.split("│")[1].strip()}
    similarity, nearest = rows["squirrel_again.jpg"]
    assert nearest == "squirrel_cls.jpg" and float(similarity) > 0.9
    assert rows["squirrel_cls.jpg"][1] == "squirrel_again.jpg"
    assert rows["baboon.jpg"][1] != "baboon.jpg" and float(rows["baboon.jpg"][0]) < float(similarity)
    assert "not an image" in rows["notes.txt"][0] + " ".join(rows["notes.txt"][1:])


def test_compare_reads_the_runs_task_and_refuses_runs_of_two_tasks(server, images, tmp_path):
    for task in ("embedding", "classification"):
        run = harness("check", images, "--url", server.grpc_url, "--task", task, "--save-tensors", "--no-isolate",
                      "--report", tmp_path / task)
        assert run.returncode == 0, run.stderr
    same = harness("compare", tmp_path / "embedding", tmp_path / "embedding", "--report", tmp_path / "same")
    assert same.returncode == 0, same.stderr
    report = json.loads((tmp_path / "same" / "report.json").read_text())
    assert report["task"] == "embedding" and report["compared"] == 4
    assert {s["name"]: s["verdict"] for s in report["stages"]}["postprocess"] == "equal"
    mixed = harness("compare", tmp_path / "embedding", tmp_path / "classification", "--report", tmp_path / "mixed")
    assert mixed.returncode == 2
    assert "run A checked embedding, run B classification: compare runs of one task" in mixed.stderr


def test_repeat_probes_the_embed_ensemble_and_the_embedder(server, photo, repository):
    session = Session(repository)
    result = check_repeatability(lambda: TritonClient(server.grpc_url, "grpc"),
                                 repository_probes("dali", session.recipe(), "embedding"),
                                 [(name, photo(name)) for name in FEW], drift(session), repeats=2, batch_sizes=(2,),
                                 concurrency=2)
    probes = {s.probe for s in result.spreads}
    assert {"embed_dali", "embedder", "preprocess_dali_taps"} == probes
    assert result.verdict.value == "equal", [s for s in result.spreads if s.max_abs]


def test_preflight_checks_the_embedding_models_ready(server):
    with TritonClient(server.grpc_url, "grpc") as client:
        plain, embedding = ({r.check: r for r in server_rows(client, load_manifest(), "cpu", task)}["models ready"]
                            for task in ("classification", "embedding"))
    assert plain.status == embedding.status == PASS
    assert (plain.expected, embedding.expected) == ("8 models", "11 models")
