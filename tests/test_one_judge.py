"""Every job judges a stage with the task's comparator (issue 49, item 2): no job module decides
a stage's (or an answer's) verdict by its own code.

Read from the jobs' source (ast, no server): within the job modules below, three things are
the comparator's alone, and each is reported as ``path:line``:

- **a number held against a tolerance**: an ordering comparison (``<``, ``<=``, ``>``, ``>=``)
  with a tolerance or a margin on one side (a name or attribute such as ``atol``, ``rtol``,
  ``tolerance``, ``PROBABILITY_ATOL``, ``tie_margin``): the comparator's arithmetic;
- **a verdict made**: a ``Verdict`` member (``Verdict.DIVERGED``, ...) written anywhere but as
  the operand a verdict is compared with (``v is Verdict.DIVERGED`` reads one, ``return
  Verdict.DIVERGED`` decides one);
- **a verdict rule called**: the tie rule (``margin_verdict``, ``reference_margin``) or a
  stage's result built by hand (``StageResult(...)``, ``Comparison(...)``).

The comparators (``harness/compare/``, ``harness/task_api/``, the tasks and their comparison
packages) are where those belong, and are not scanned.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JOBS = ("harness/check", "harness/diagnose", "harness/accuracy", "harness/layers/job.py",
        "harness/layers/repeatability.py", "harness/merge.py", "harness/compare_runs.py",
        "harness/cli", "loadtest")
"""The jobs: check, diagnose, accuracy, repeat, merge, compare, the commands, watch and the load test."""
TOLERANCE_NAME = re.compile(r"(^|_)([ar]?tol|tolerances?|margin)($|_)", re.IGNORECASE)
VERDICT_RULES = {"margin_verdict", "reference_margin", "StageResult", "Comparison"}
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
NOT_A_JUDGEMENT = {
    ("harness/diagnose/evaluation.py", "makes the verdict Verdict.DIVERGED"):
        "the reference raised on the image: nothing was compared; the image is recorded as failed at decode, "
        "with the reason",
}
"""(module, finding) -> why it is no comparison of its own: each one named and explained here."""


def job_files() -> list[Path]:
    files = []
    for entry in JOBS:
        path = ROOT / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _identifiers(node: ast.AST):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _called(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else None


def own_judgements(source: str, name: str) -> list[str]:
    """``name:line what`` for each place ``source`` decides a verdict itself (the module docstring's three kinds)."""
    tree = ast.parse(source)
    read = set()  # the Verdict members that are operands of a comparison: reading a verdict, not making one
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for operand in operands:
                read.update(id(sub) for sub in ast.walk(operand))
            if any(isinstance(op, ORDERING) for op in node.ops):
                held = sorted({i for i in _identifiers(node) if TOLERANCE_NAME.search(i)})
                if held:
                    found.append(f"{name}:{node.lineno} holds a number against {', '.join(held)}")
        elif isinstance(node, ast.Call) and _called(node) in VERDICT_RULES:
            found.append(f"{name}:{node.lineno} calls the verdict rule {_called(node)}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Verdict"
                and node.attr.isupper() and id(node) not in read):
            found.append(f"{name}:{node.lineno} makes the verdict Verdict.{node.attr}")
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1].split()[0])))


def test_no_job_decides_a_verdict_by_its_own_code():
    found = [line for path in job_files()
             for line in own_judgements(path.read_text(), str(path.relative_to(ROOT)))
             if (line.split(":")[0], line.split(" ", 1)[1]) not in NOT_A_JUDGEMENT]
    assert not found, "a job judges by its own code; ask the task's comparator instead:\n" + "\n".join(found)


def test_the_job_list_names_real_modules():
    # A renamed job would otherwise drop out of the scan unseen, and an exemption outlive its line.
    assert all((ROOT / entry).exists() for entry in JOBS)
    assert len(job_files()) > 40
    found = {(line.split(":")[0], line.split(" ", 1)[1]) for path in job_files()
             for line in own_judgements(path.read_text(), str(path.relative_to(ROOT)))}
    assert set(NOT_A_JUDGEMENT) <= found


@pytest.mark.parametrize(("source", "what"), [
    ("if moved > atol:\n    pass", "holds a number against atol"),
    ("ok = metrics['max_abs'] <= tolerance.atol + 1", "holds a number against atol, tolerance"),
    ("ok = 0 < m < self.tie_margin", "holds a number against tie_margin"),
    ("def f():\n    return Verdict.DIVERGED", "makes the verdict Verdict.DIVERGED"),
    ("v = Verdict.TIE if near else Verdict.CLOSE", "makes the verdict Verdict.TIE"),
    ("x = margin_verdict(m, 0.5)", "calls the verdict rule margin_verdict"),
    ("r = StageResult(stage, verdict, {})", "calls the verdict rule StageResult"),
])
def test_each_kind_of_own_judgement_is_found(source, what):
    assert any(what in line for line in own_judgements(source, "job.py"))


@pytest.mark.parametrize("source", [
    "if result.verdict is Verdict.DIVERGED:\n    pass",
    "bad = [s for s in stages if s.verdict in (Verdict.TIE, Verdict.DIVERGED)]",
    "worst = Verdict.worst(s.verdict for s in stages)",
    "if len(rows) > limit:\n    pass",
    "comparison = task.comparator(reference, deployed, tolerance)",
])
def test_reading_a_verdict_or_asking_the_comparator_is_not_a_judgement(source):
    assert own_judgements(source, "job.py") == []
