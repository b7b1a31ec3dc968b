"""Every answer under load is judged against the photo's answer alone.

Against a foreign deployment whose classifier answers wrongly inside a batch (every request
after the first of an executed batch gets its class-0 logit raised: ``tests.foreign``), the
load test reports no wrong answer at 1 client and wrong answers at 4, with the batch size the
server ran, over gRPC and HTTP. The rules themselves are checked below on real answers, with no
server."""

import json

import numpy as np
import pytest

from harness.compare.answers import judge_top_k, top_k
from harness.detection.compare import judge_answer as judge_boxes
from loadtest.answers import WRONG_ANSWER, KnownAnswers
from tests.foreign import ENSEMBLE, STEPS, serve_batch_dependent
from tests.loadtest.test_locustfile import locust, read_csv
from tests.loadtest.test_sweep import against, sweep


@pytest.fixture(scope="module")
def batch_dependent(repository, tmp_path_factory):
    with serve_batch_dependent(tmp_path_factory.mktemp("batch_dependent") / "repository",
                               repository / "classifier" / "model.onnx") as server:
        yield server


def test_wrong_answers_rise_with_clients_where_the_server_batches(batch_dependent, tmp_path):
    run = sweep(*against(batch_dependent), "--model", ENSEMBLE, "--clients", 1, 4, "--warmup", "1", "--duration", "4",
                "--report", tmp_path)
    assert run.returncode == 1, run.stderr  # a wrong answer fails the sweep
    points = {(p["protocol"], p["clients"]): p for p in json.loads((tmp_path / "results.json").read_text())["points"]}
    assert set(points) == {(protocol, clients) for protocol in ("grpc", "http") for clients in (1, 4)}
    for (protocol, clients), point in points.items():
        stats, batch = point["stats"], {b["model"]: b["avg_batch"] for b in point["breakdown"]}[STEPS[2]]
        assert stats["requests"] > 0 and stats["verified"] == stats["requests"] and stats["unverified"] == 0
        if clients == 1:  # alone, the model answers right
            assert stats["wrong_answers"] == 0 and stats["errors"] == {} and batch == 1.0, (protocol, stats)
        else:
            assert stats["wrong_answers"] > 0 and batch > 1.0, (protocol, stats, batch)
            assert stats["errors"] == {WRONG_ANSWER: stats["wrong_answers"]}
    table = (tmp_path / "comparison.md").read_text()
    assert "| wrong answers | avg batch |" in table and "wrong answer" in run.stderr


def test_a_wrong_answer_is_a_locust_failure_of_its_own_type(batch_dependent, tmp_path):
    run = locust("-u", 4, "-r", 4, "-t", "5s", "--host", batch_dependent.grpc_url, "--protocol", "grpc",
                 "--ensemble", ENSEMBLE, "--csv", tmp_path / "run", timeout=180)
    assert run.returncode == 1, run.stderr
    failures = {r["Error"]: int(r["Occurrences"]) for r in read_csv(tmp_path / "run_failures.csv")}
    assert set(failures) == {WRONG_ANSWER} and failures[WRONG_ANSWER] > 0
    assert "where the photo alone answers" in run.stderr  # the first wrong answer's detail, logged once
    # Unverified, the same load looks healthy: what --no-verify measures.
    run = locust("-u", 4, "-r", 4, "-t", "3s", "--host", batch_dependent.grpc_url, "--protocol", "grpc",
                 "--ensemble", ENSEMBLE, "--no-verify", "--csv", tmp_path / "unverified", timeout=180)
    assert run.returncode == 0, run.stderr


def test_top_k_rule_on_tritons_classification_strings():
    known = {"prob": np.array([b"0.61:335:fox squirrel", b"0.20:336:marmot", b"0.05:0"], dtype=object)}
    assert top_k(known["prob"])[0].tolist() == [335, 336, 0]
    same = judge_top_k(known, {"prob": np.array([b"0.63:335", b"0.19:336"], dtype=object)})
    assert same.change is None and same.error == pytest.approx(0.02)
    flipped = judge_top_k(known, {"prob": np.array([b"0.9:0", b"0.05:335"], dtype=object)})
    assert "top-1 class 0" in flipped.change and flipped.error == np.inf
    assert "tolerance 0.05" in judge_top_k(known, {"prob": np.array([b"0.45:335", b"0.4:336"], dtype=object)}).change
    logits = {"logits": np.array([b"11.2:335", b"9.0:336"], dtype=object)}  # logits: the drift rule's 0.5
    assert judge_top_k(logits, {"logits": np.array([b"11.6:335", b"9.1:336"], dtype=object)}).change is None
    assert "tolerance 0.5" in judge_top_k(logits, {"logits": np.array([b"12.0:335", b"9.1:336"], dtype=object)}).change


def test_boxes_rule_is_the_detection_tasks():
    quads = np.array([[[10, 10], [110, 10], [110, 40], [10, 40]], [[200, 50], [260, 50], [260, 70], [200, 70]]],
                     np.float32)
    known = {"BOXES": quads, "SCORES": np.array([0.9, 0.8], np.float32)}
    close = judge_boxes(known, {"BOXES": quads + 1, "SCORES": known["SCORES"]})  # a pixel: close
    assert close.change is None and close.error == pytest.approx(np.sqrt(2))
    moved = quads.copy()
    moved[1] += 30
    assert "worst corner moved" in judge_boxes(known, {"BOXES": moved, "SCORES": known["SCORES"]}).change
    assert "1 missed" in judge_boxes(known, {"BOXES": quads[:1], "SCORES": known["SCORES"][:1]}).change
    near = {"BOXES": quads, "SCORES": np.array([0.9, 0.52], np.float32)}  # near the 0.5 threshold: a tie
    assert judge_boxes(near, {"BOXES": quads[:1], "SCORES": near["SCORES"][:1]}).change is None


def test_known_answers_travel_in_a_locust_message():
    record = KnownAnswers({"a1": {"prob": np.array([b"0.61:335", b"0.2:336"], dtype=object)},
                           "b2": {"BOXES": np.zeros((0, 4, 2), np.float32), "SCORES": np.zeros(0, np.float32)}})
    import msgpack  # Locust's own wire format

    back = KnownAnswers.from_message(msgpack.unpackb(msgpack.packb(record.to_message()), raw=False))
    assert back.answers["b2"]["BOXES"].shape == (0, 4, 2) and back.answers["b2"]["SCORES"].dtype == np.float32
    assert back.judge("a1", {"prob": np.array([b"0.9:0"], dtype=object)}).change
    assert back.judge("unknown", {"prob": np.array([b"0.9:0"], dtype=object)}) is None
    assert back.judge("b2", record.answers["b2"]).change is None


def test_the_rules_need_only_what_the_locust_image_has():
    """docker/locust.Dockerfile installs tritonclient, numpy, matplotlib, rich and shapely: the
    judging of a classifier's, a detector's and an OCR model's answers runs with everything else
    unimportable (a segmenter's boundary F needs OpenCV)."""
    import subprocess
    import sys

    code = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"cv2", "PIL", "torch", "torchvision", "nvidia", "onnxruntime", "pyclipper", "scipy"}:
            raise ImportError(f"{name} is not in the Locust image")
sys.meta_path.insert(0, Refuse())
import numpy as np
from loadtest.answers import rule_for
import harness.deployment.discovery
q = np.array([[[10, 10], [110, 10], [110, 40], [10, 40]]], np.float32)
boxes = {"BOXES": q, "SCORES": np.ones(1)}
assert rule_for(boxes)(boxes, {"BOXES": q + 30, "SCORES": np.ones(1)}).change
words = {**boxes, "TEXTS": np.array([b"SALE"], dtype=object)}
assert rule_for(words)(words, {**words, "TEXTS": np.array([b"SOLE"], dtype=object)}).change
top = {"p": np.array([b"0.6:3"], dtype=object)}
assert rule_for(top)(top, top).change is None
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def judge_embedding(known, answer):
    """A toy task's rule, registered by the test below as a new task would register its own."""
    from harness.task_api import Judgement

    moved = float(np.abs(answer["EMBEDDING"] - known["EMBEDDING"]).max())
    return Judgement(None if moved == 0 else f"embedding moved by {moved:g}", moved)


def test_the_load_test_judges_by_the_rule_a_task_registers(monkeypatch):
    """The rules come from the task registry: a new task's answer is judged by its rule, and
    the load test's module names no task."""
    from harness.task import ANSWER_RULES, BUILT_IN, TASKS
    from harness.task_api import AnswerRule

    for name, rule in ANSWER_RULES.items():  # each shipped rule is a task's, holding what its models answer
        task = TASKS[name]
        assert name in BUILT_IN and callable(rule.load())
        assert task.repository is None or set(task.repository.results) <= set(rule.outputs) or not rule.outputs
    monkeypatch.setitem(ANSWER_RULES, "toy", AnswerRule(("EMBEDDING",), f"{__name__}:judge_embedding"))
    vector = np.arange(4, dtype=np.float32)
    known = KnownAnswers({"photo": {"EMBEDDING": vector}})
    assert known.judge("photo", {"EMBEDDING": vector}).change is None
    assert known.judge("photo", {"EMBEDDING": vector + 0.5}).change == "embedding moved by 0.5"
    assert known.judge("other", {"EMBEDDING": vector}) is None
