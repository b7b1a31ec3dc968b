"""A task the project does not ship, from the user's own file: ``--task FILE.py:NAME``.

The task is written here into a temporary folder (not the package) and needs nothing but the
task API (``harness.task_api``): it reads the classifier's logits and judges the softmax's
entropy and argmax parity, with its own comparator, result stage, events and report section.
"""

import json
import textwrap

import pytest

from tests.commands import harness
from tests.conftest import copy_photos

FEW = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "messi5.jpg"]

ENTROPY_TASK = '''
from dataclasses import dataclass

import numpy as np

from harness.task_api import (Comparator, Comparison, Event, Events, OutputChoice, ScoreKind, Section, Stage, Task,
                               Verdict)

ENTROPY = ScoreKind("entropy", "nats", distribution=False)


@dataclass(frozen=True)
class EntropyRule:
    """The entropy of the softmax may move by ``max_change`` nats: on the four photos an aligned deployment
    moves it by at most 0.022 (baboon, an uncertain image), a planted misaligned resize by 0.057 to 0.37."""

    max_change: float = 0.05


def entropy(logits):
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return float(-(p * np.log(np.clip(p, 1e-30, None))).sum())


class EntropyParity(Comparator):
    """The comparator: the softmax's entropy and the argmax of two logit vectors."""

    tolerance_type = EntropyRule

    def __call__(self, reference, deployed, tolerance):
        change = entropy(deployed) - entropy(reference)
        same = int(np.argmax(reference) == np.argmax(deployed))
        verdict = (Verdict.EQUAL if change == 0 and same else
                   Verdict.CLOSE if abs(change) <= tolerance.max_change and same else Verdict.DIVERGED)
        return Comparison(verdict, {"argmax_same": float(same), "entropy_change": change, "max_abs": abs(change),
                                    "mean_abs": abs(change)})


class Moved(Events):
    task = "entropy"

    def __init__(self):
        self.moved = []

    def add(self, result):
        stage = result.stage(Stage.POSTPROCESS)
        if stage is not None and stage.verdict is Verdict.DIVERGED:
            self.moved.append(Event(result.image, stage.verdict, {"entropy_change": stage.metrics["entropy_change"]}))

    def result(self):
        return tuple(sorted(self.moved, key=lambda e: e.image)), {"moved": len(self.moved)}


class Entropy(Task):
    name = "entropy"
    noun = "class scores"
    result_stage = Stage.POSTPROCESS
    csv_fields = ("entropy_verdict", "argmax_same", "entropy_change")

    def choose_output(self, model, choice):
        vectors = [t for t in model.outputs if t.data_type == "TYPE_FP32" and max(t.dims) > 1]
        named = [t for t in vectors if t.name == choice] if choice else vectors
        return OutputChoice(named[0].name, "logits", "the scores") if named else OutputChoice(None, why="no scores")

    def signs(self, tensor, labelled):
        return f"output {tensor.name} holds logits" if "logit" in tensor.name.lower() else None

    def output_kind(self, name, probe):
        return ENTROPY

    def default_margin(self, tolerances, kind):
        return 0.0

    def compare_result(self, reference, deployed, isolated, margin, top_k, scores):
        return EntropyParity().stage(Stage.POSTPROCESS, reference, deployed, isolated, EntropyRule())

    def events(self, margin):
        return Moved()

    def summary_line(self, report):
        return f"Softmax entropy moved beyond {EntropyRule().max_change} nats on {len(report.summary.events)} images."

    def sections(self, report):
        rows = tuple((e.image, e.verdict.value, f"{e.details['entropy_change']:+.4f}") for e in report.summary.events)
        return [Section("Images whose softmax entropy moved", "Beyond the entropy rule, or a changed argmax.",
                        ("image", "verdict", "entropy change (nats)"), rows, verdict_column=1)] if rows else []
'''


@pytest.fixture(scope="module")
def images(photos_dir, tmp_path_factory):
    return copy_photos(photos_dir, FEW, tmp_path_factory.mktemp("images"))


@pytest.fixture
def entropy_task(tmp_path):
    path = tmp_path / "user" / "entropy_task.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(ENTROPY_TASK))
    return f"{path}:Entropy"


def _check(server, images, out, task, repository, *more):
    return harness("check", images, "--url", server.grpc_url, "--model", "classify_dali", "--task", task,
                   "--reference-model", repository / "classifier" / "model.onnx", "--report", out, "--no-isolate", *more)


def test_a_users_task_checks_a_deployment_with_its_own_comparator(server, images, entropy_task, repository, tmp_path):
    aligned = _check(server, images, tmp_path / "aligned", entropy_task, repository, "--save-tensors")
    assert aligned.returncode == 0, aligned.stdout + aligned.stderr
    report = json.loads((tmp_path / "aligned" / "report.json").read_text())
    assert report["task"] == "entropy"
    result = next(s for s in report["stages"] if s["name"] == "postprocess")
    assert result["verdict"] in ("equal", "close") and result["metrics"]["argmax_same"]["worst"] == 1.0
    assert abs(result["metrics"]["entropy_change"]["worst"]) <= 0.05
    assert "Softmax entropy moved beyond 0.05 nats on 0 images." in (tmp_path / "aligned" / "report.md").read_text()

    # `harness compare` of the saved run with itself, by the same task: its kind and its result stage read back
    again = harness("compare", tmp_path / "aligned", tmp_path / "aligned", "--task", entropy_task,
                    "--report", tmp_path / "self")
    assert again.returncode == 0, again.stdout + again.stderr
    compared = json.loads((tmp_path / "self" / "report.json").read_text())
    assert compared["task"] == "entropy"
    assert next(s for s in compared["stages"] if s["name"] == "postprocess")["verdict"] == "equal"

    # Training resized without antialias where the deployment antialiases: the entropy moves, and says so.
    planted = _check(server, images, tmp_path / "planted", entropy_task, repository,
                     "--spec", repository.parent / "specs" / "misaligned_resize.toml")
    assert planted.returncode == 1, planted.stdout + planted.stderr
    report = json.loads((tmp_path / "planted" / "report.json").read_text())
    moved = [e["image"] for e in report["events"]]
    assert moved and set(moved) <= set(FEW) and report["task_figures"] == {"moved": len(moved)}
    markdown = (tmp_path / "planted" / "report.md").read_text()
    assert "Images whose softmax entropy moved" in markdown and moved[0] in markdown


def test_a_users_task_that_is_not_a_task_is_refused_in_one_line(tmp_path):
    path = tmp_path / "not_a_task.py"
    path.write_text("class Entropy:\n    name = 'entropy'\n")
    refused = harness("check", tmp_path, "--task", f"{path}:Entropy")
    assert refused.returncode == 2 and "is not a harness.task.Task" in refused.stderr
    assert "Traceback" not in refused.stderr
