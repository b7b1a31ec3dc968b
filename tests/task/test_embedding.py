"""harness/task/embedding.py on real EfficientNet-Lite0 features of real photos (ONNX Runtime,
no server): the normalized result, the neighbour events, retrieval and its paired test."""

import json

import numpy as np
import pytest

from harness.compare.aggregate import RunSummary
from harness.model import ONNX_FILENAME, onnx_session
from harness.preprocessing import opencv
from harness.result import ImageResult
from harness.spec import with_overrides
from harness.stage import Stage
from harness.task import TASKS, claimed_by, get_task
from harness.task.embedding import (
    MIN_COSINE,
    SIMILARITY_MARGIN,
    Embedding,
    NeighbourChanges,
    normalized,
    result_metrics,
    retrieval,
)
from harness.verdict import Verdict

PHOTOS = ("squirrel_cls.jpg", "baboon.jpg", "orange.jpg", "fruits.jpg", "apple.jpg", "HappyFish.jpg", "board.jpg",
          "aero1.jpg")


@pytest.fixture(scope="module")
def features(repository, spec, photo):
    """Each photo's features with the aligned preprocessing, and with a stretch to 224x224
    (a real preprocessing difference), through the real embedder."""
    session = onnx_session(repository / Embedding.repository.model / ONNX_FILENAME, 1)
    stretched = with_overrides(spec.preprocess, resize={"mode": "stretch"})

    def embed(p):
        batch = np.stack([opencv.run(photo(n), p)["input"] for n in PHOTOS])
        return session.run(None, {"input": batch})[0]

    return embed(spec.preprocess), embed(stretched)


def test_the_registry_names_every_task_and_refuses_others():
    from harness.errors import UsageError
    from harness.task import BUILT_IN

    assert list(TASKS) == list(BUILT_IN) and list(BUILT_IN)[:5] == ["classification", "embedding", "detection", "ocr",
                                                                      "segmentation"]
    assert get_task(None) is TASKS["classification"]
    with pytest.raises(UsageError, match=f"--task keypoints: no such task; tasks: {', '.join(BUILT_IN)}, or "):
        get_task("keypoints")


def test_discovery_signs_pick_the_task():
    from harness.deployment.discovery import ModelInfo, TensorInfo

    def model(*outputs, labelled=()):
        return ModelInfo("m", "python", 8, (TensorInfo("IMAGE", "TYPE_STRING", (1,)),), outputs, labelled=labelled)

    logits, embedding = TensorInfo("LOGITS", "TYPE_FP32", (1000,)), TensorInfo("EMBEDDING", "TYPE_FP32", (1280,))
    assert claimed_by(model(embedding))[0].name == "embedding"
    assert claimed_by(model(logits, embedding))[0].name == "classification"
    unnamed = TensorInfo("out", "TYPE_FP32", (10,))
    assert claimed_by(model(unnamed, labelled=("out",))) == (TASKS["classification"], "output out has a label file")
    assert claimed_by(model(unnamed))[1] == "the default task"
    assert TASKS["embedding"].choose_output(model(logits, embedding), None).name == "EMBEDDING"
    bytes_out = model(TensorInfo("x", "TYPE_UINT8", (5,)))
    assert TASKS["embedding"].choose_output(bytes_out, "x").why == \
        "output x UINT8 [5] of 'm' is not an embedding (one FP32 dimension of features)"


def test_same_features_are_equal_and_aligned_ones_close(features):
    aligned, stretched = features
    verdict, m = result_metrics(aligned[0], aligned[0])
    assert verdict is Verdict.EQUAL and m["cosine"] == pytest.approx(1.0) and m["normalized_l2"] == pytest.approx(0, abs=1e-6)
    # A one-level-like perturbation: the features of the same photo with 1e-3 noise: close.
    noisy = aligned[0] + np.random.default_rng(0).normal(0, 1e-3, aligned[0].shape).astype(np.float32)
    assert result_metrics(aligned[0], noisy)[0] is Verdict.CLOSE
    # Stretching instead of shorter side + crop moves the features beyond MIN_COSINE on some photo.
    verdicts = [result_metrics(a, s) for a, s in zip(aligned, stretched)]
    assert any(v is Verdict.DIVERGED and m["cosine"] < MIN_COSINE for v, m in verdicts)


def test_zero_and_nan_vectors_diverge_named(features):
    aligned, _ = features
    verdict, m = result_metrics(aligned[0], np.zeros_like(aligned[0]))
    assert verdict is Verdict.DIVERGED and m["zero_vector"] == 1.0 and m["nonfinite"] == 0.0
    nan = aligned[0].copy()
    nan[3] = np.nan
    verdict, m = result_metrics(aligned[0], nan)
    assert verdict is Verdict.DIVERGED and m["nonfinite"] == 1.0 and m["zero_vector"] == 0.0
    assert normalized(np.zeros(4)) is None and normalized(np.array([np.inf, 1.0])) is None
    task = TASKS["embedding"]
    assert task.image_data(aligned[0], nan) is None  # nothing to rank neighbours with
    json.dumps(task.compare_result(aligned[0], nan, None, SIMILARITY_MARGIN, 5).metrics)  # still a row


def test_neighbour_events_fold_through_the_run_summary(features):
    """A check's events: every image's two embeddings kept (through images.jsonl and back), the
    nearest neighbours compared at the end."""
    aligned, stretched = features
    task = TASKS["embedding"]
    run = RunSummary(events=task.events(SIMILARITY_MARGIN))
    for name, ref, dep in zip(PHOTOS, aligned, stretched):
        result = ImageResult(name, (task.compare_result(ref, dep, None, SIMILARITY_MARGIN, 5),),
                             task_data=task.image_data(ref, dep))
        run.add(ImageResult.from_dict(json.loads(json.dumps(result.to_dict()))))
    summary = run.result()
    changes = NeighbourChanges.of(np.stack([normalized(v) for v in aligned]),
                                  np.stack([normalized(v) for v in stretched]))
    assert summary.task == "embedding" and summary.flips == ()
    assert [e.image for e in summary.events] == sorted(PHOTOS[i] for i in changes.changed())
    assert summary.figures["gallery"] == len(PHOTOS) and summary.figures["neighbour_changes"] == len(summary.events)
    for event in summary.events:
        assert event.verdict is (Verdict.TIE if event.details["margin"] <= SIMILARITY_MARGIN else Verdict.DIVERGED)
    assert summary.stage(Stage.POSTPROCESS).verdict is Verdict.DIVERGED
    same = RunSummary(events=task.events(SIMILARITY_MARGIN))
    for name, ref in zip(PHOTOS, aligned):
        same.add(ImageResult(name, (task.compare_result(ref, ref, None, 0.01, 5),), task_data=task.image_data(ref, ref)))
    assert same.result().events == () and same.result().figures["neighbour_overlap"] == 1.0


def test_retrieval_by_label_and_its_paired_test(features):
    aligned, stretched = features
    labels = ["a", "a", "b", "b", "c", "c", None, "d"]  # 'd' alone and an unlabeled image: not queries
    effect = retrieval(labels, {"reference": aligned, "stretched": stretched, "same": aligned}, SIMILARITY_MARGIN)
    assert effect.queries == 6 and effect.images == len(PHOTOS)
    ref, stretched_path, same = effect.paths
    assert all(0.0 <= ref.recall[k] <= 1.0 for k in (1, 5)) and ref.recall[5] >= ref.recall[1]
    assert same.neighbour_changes == 0 and same.neighbour_overlap == 1.0 and same.mcnemar.b == same.mcnemar.c == 0
    assert stretched_path.neighbour_overlap < 1.0

    def hits(vectors):  # recall@1 by hand: the nearest other image has the query's label
        unit = np.stack([normalized(v) for v in vectors])
        nearest = [int(np.argmax(np.where(np.arange(8) == i, -9, unit @ unit[i]))) for i in range(8)]
        return np.array([labels[nearest[i]] == labels[i] for i in range(6)])

    assert ref.recall[1] == pytest.approx(hits(aligned).mean())
    assert stretched_path.recall[1] == pytest.approx(hits(stretched).mean())
    d = effect.to_dict(list(PHOTOS))
    assert d["paths"][1]["recall@1"] == stretched_path.recall[1] and "mcnemar" in d["paths"][1]
    assert any("recall@1" in line for line in effect.markdown(list(PHOTOS)))
    unlabeled = retrieval([None] * 8, {"reference": aligned, "stretched": stretched}, SIMILARITY_MARGIN)
    assert unlabeled.paths[1].recall[1] is None and unlabeled.paths[1].mcnemar is None
