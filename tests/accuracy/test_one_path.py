"""accuracy is one path over the task registry (issue 49): a task registered here, named by no
code of accuracy's, is scored, judged and written by the code every built-in task goes through,
into the one accuracy.json layout; accuracy's modules name no task; merge reads the old
classification layout as what it is, and refuses a file of neither layout. No server, no model."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from harness.accuracy import REFERENCE, Dataset, Predictions, Sample
from harness.accuracy.job import READERS, AccuracyOptions, AccuracyResult, score
from harness.accuracy.report import render_markdown, write_accuracy_files
from harness.accuracy.shards import read_accuracy_json
from harness.errors import EXIT_FOUND, EXIT_OK, UsageError
from harness.results import AccuracyRun, ReferenceInfo, ServerInfo
from harness.results.interface import Case, Status
from harness.task import BUILT_IN, TASKS, get_task
from harness.task_api import Task
from tests.accuracy.test_scoring import hand_case
from tests.accuracy.test_scoring import report as classification_report

ROOT = Path(__file__).resolve().parents[2]
ACCURACY_CODE = ("harness/accuracy", "harness/results/accuracy.py", "harness/merge.py")
OLD_LAYOUT_READER = "read_accuracy_json"
"""The one place that may name a task: the old layout was classification's alone."""


@dataclass(frozen=True)
class Brightness:
    """The test task's effect: each path's mean output, a change where a deployed mean moves beyond the margin."""

    means: dict
    margin: float

    def any_changes(self, ties: bool = True) -> bool:
        reference = self.means[REFERENCE]
        return any(abs(m - reference) > (0 if ties else self.margin) for p, m in self.means.items() if p != REFERENCE)

    def cases(self, models, ties_fail, name):
        return [Case(model, name, Status.FAILED if abs(self.means[p] - self.means[REFERENCE]) > self.margin
                     else Status.PASSED, f"mean {self.means[p]:g}") for p, model in zip(list(self.means)[1:], models)]

    def to_dict(self, names):
        return {"images": list(names), "means": self.means}

    def markdown(self, names):
        return ["| path | mean |", "|---|---:|", *(f"| {p} | {m:g} |" for p, m in self.means.items())]


class BrightnessTask(Task):
    """A task of this test only: its effect from the raw outputs (the default reading)."""

    name = "brightness-of-this-test"
    processed_word = "measured"

    def effect(self, labels, outputs, margin):
        return Brightness({path: float(np.mean(x)) for path, x in outputs.items()}, margin)


@pytest.fixture
def registered(monkeypatch):
    """BrightnessTask in the one registry, for this test only (its private tables restored after)."""
    monkeypatch.setitem(TASKS._places, BrightnessTask.name, f"{__file__}:BrightnessTask")
    monkeypatch.setitem(TASKS._tasks, BrightnessTask.name, BrightnessTask())
    return get_task(BrightnessTask.name)


def brightness_run(dali_outputs: dict):
    samples = tuple(Sample(f"img{i}.jpg", Path(f"img{i}.jpg"), i % 2) for i in range(4))
    dataset = Dataset(Path("set.csv"), "csv", samples, ("dark", "light"))
    outputs = {name: np.full(3, float(i), np.float32) for i, name in enumerate(s.name for s in samples)}
    reference = Predictions(REFERENCE, {}, {"img3.jpg": "not an image"}, {k: v for k, v in outputs.items() if k != "img3.jpg"})
    dali = Predictions("dali", {}, {"img3.jpg": "not an image"}, {**outputs, **dali_outputs})
    del dali.logits["img3.jpg"]
    return dataset, [reference, dali]


def test_a_task_registered_anywhere_is_scored_judged_and_written_by_the_one_path(registered, tmp_path):
    """Nothing of accuracy's names the task: its effect (Task.effect_on's default, from the raw
    outputs), its verdict, its cases and its files come out of the path every task takes."""
    for dali_outputs, status in (({}, EXIT_OK), ({"img1.jpg": np.full(3, 9.0, np.float32)}, EXIT_FOUND)):
        dataset, predictions = brightness_run(dali_outputs)
        report = score(registered, dataset, {p.path: p.failed for p in predictions}, {"predictions": predictions},
                       0.5, dataset.label_names, 5, models=("bright_dali",), reference=ReferenceInfo("r", "m", "n"),
                       server=ServerInfo("server", "grpc"), spec="spec.toml",
                       run=AccuracyRun(0.1, 8, "diverged", True, 0.5, 5))
        files = write_accuracy_files(tmp_path / str(status), report, ("json", "md", "html", "junit"))
        result = AccuracyResult(report, files["json"], files["markdown"], AccuracyOptions(Path("set.csv"), tmp_path))
        assert "bright_dali" in files["html"].read_text() and "bright_dali" in files["junit"].read_text()
        assert result.exit_status() == status and report.verdict == ("unchanged" if status == EXIT_OK else "diverged")
        data = json.loads(files["json"].read_text())
        assert data["task"] == registered.name and data["effect"]["images"] == ["img0.jpg", "img1.jpg", "img2.jpg"]
        assert data["failed"] == [{"image": "img3.jpg", "reason": "reference: not an image; dali: not an image",
                                   "outcome": "failed"}]
        assert [c.status for c in report.cases() if c.name == "bright_dali"] == [
            Status.PASSED if status == EXIT_OK else Status.FAILED]
        assert "| dali |" in render_markdown(report) and "could be measured" not in render_markdown(report)


def test_every_task_reports_in_the_one_layout(tmp_path):
    """classification's accuracy.json has the same top level as every other task's: its scores under
    ``effect``, the run's options (tie margin, k) under ``run``."""
    dataset, predictions = hand_case()
    data = classification_report(dataset, predictions).to_dict()
    assert list(data) == ["task", "reference", "deployed", "spec", "run", "dataset", "effect", "failed", "images"]
    assert {"paths", "images"} <= set(data["effect"]) and data["run"]["top_k"] == 5


def test_accuracy_code_names_no_task_and_dispatches_on_none():
    """No module of accuracy's (job, report, shards, merge) holds a task's name, compares what a task
    reads by (``effect_from``) or imports a task's own module: a task's scorer is its Task hook."""
    names = set(BUILT_IN)
    own = [name.partition(":")[0] for name in BUILT_IN.values()]
    problems = []
    files = [p for d in ACCURACY_CODE for p in ((ROOT / d).rglob("*.py") if (ROOT / d).is_dir() else [ROOT / d])]
    for path in files:
        tree = ast.parse(path.read_text())
        exempt = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == OLD_LAYOUT_READER
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in exempt:
                problems.append(f"{where}: names the task {node.value!r}")
            if isinstance(node, ast.Compare) and any(isinstance(n, ast.Attribute) and n.attr == "effect_from"
                                                     for n in ast.walk(node)):
                problems.append(f"{where}: compares effect_from")
            if isinstance(node, ast.ImportFrom) and node.module and any(node.module.startswith(m) for m in own):
                problems.append(f"{where}: imports the task module {node.module}")
    assert not problems, "\n".join(problems)
    assert set(READERS) >= {get_task(name).effect_from for name in BUILT_IN}


def old_layout(new: dict) -> dict:
    """The classification accuracy.json of before the one layout (scores at the top level), as it was written."""
    old = {k: v for k, v in new.items() if k not in ("task", "effect", "images")}
    old["deployed"] = {k: v for k, v in new["deployed"].items() if k != "models"}
    old["run"] = {k: v for k, v in new["run"].items() if k not in ("tie_margin", "top_k")}
    old["dataset"] = {("classes" if k == "labels" else k): v for k, v in new["dataset"].items()}
    images = [{**label, **scores} for label, scores in zip(new["images"], new["effect"]["images"])]
    return {**old, "top_k": new["run"]["top_k"], "paths": new["effect"]["paths"], "tie_margin": new["run"]["tie_margin"],
            "images": images}


def test_merge_reads_the_old_classification_layout_as_the_one_and_refuses_neither(tmp_path):
    dataset, predictions = hand_case()
    new = classification_report(dataset, predictions).to_dict()
    (tmp_path / "old.json").write_text(json.dumps(old_layout(new)))
    assert read_accuracy_json(tmp_path / "old.json") == json.loads(json.dumps(new))
    (tmp_path / "other.json").write_text(json.dumps({"paths": [], "dataset": {}}))
    with pytest.raises(UsageError, match="neither accuracy.json layout.*'effect'"):
        read_accuracy_json(tmp_path / "other.json")
