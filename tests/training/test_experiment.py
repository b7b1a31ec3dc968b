"""The experiment's table: mean ± SD over seeds, diffs against in-process per seed, pooled McNemar."""

from __future__ import annotations

from harness.training.experiment import PathResult, RunResult, render_table
from harness.training.train import EpochStats


def _run(seed: int, in_process: float, served: float, b: int, c: int) -> RunResult:
    return RunResult("torchvision", 0.05, seed, 12, 100, EpochStats(1, 0.1, 1.0, None), (
        PathResult("in-process", in_process, in_process, in_process, None, None, None, None),
        PathResult("classify_dali", served, served, served, b + c, b, c, 1.0)))


def test_table_rows_means_spreads_and_pooled_mcnemar():
    table = render_table([_run(0, 0.90, 0.92, 0, 2), _run(1, 0.80, 0.80, 1, 1)]).splitlines()
    assert table[0].startswith("| index | train type | inference path | recall | diff | precision | diff |")
    assert len(table) == 4
    in_process, served = (row.split(" | ") for row in table[2:])
    assert in_process[1:3] == ["torchvision, 5% data (12 images), 2 seeds", "in-process"]
    assert in_process[3] == "85.00 ± 7.07" and in_process[4] == ""
    assert served[2] == "classify_dali" and served[3] == "86.00 ± 8.49"
    assert served[4] == "+1.00 ± 1.41"  # per-seed diffs +2 and 0
    assert served[9] == "2.00% (4/200)" and served[10] == "1/3, p = 0.625 |"
