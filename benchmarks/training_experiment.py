"""The train/serve preprocessing-mismatch experiment on ants vs bees (docs/training.md).

Fine-tunes EfficientNet-Lite0's head with the torchvision PIL recipe and with the deployed
DALI graph, on 100% and 5% of ``../shared/datasets/hymenoptera/train`` (stratified, per
seed), serves every model with the embedded Triton and classifies ``val/`` in-process
and through ``classify_dali`` and ``classify_opencv``
(:mod:`harness.training.experiment`). Writes ``experiment.json`` (every run) and
``table.md`` (mean ± SD over seeds) into ``--out``. A benchmark, run once: about 10
minutes on 2 cores.

    .venv/bin/python benchmarks/training_experiment.py [--seeds 0 1 2 3 4] [--out reports/training]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from harness.paths import BUILD_DIR, PROJECT_ROOT
from harness.session import Session
from harness.training.data import load_training_set
from harness.training.experiment import ExperimentConfig, render_table, run_experiment, runs_to_json

DEFAULT_DATASET = PROJECT_ROOT.parent / "shared" / "datasets" / "hymenoptera"


def main() -> None:
    d = ExperimentConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(d.seeds))
    parser.add_argument("--fractions", type=float, nargs="+", default=list(d.fractions))
    parser.add_argument("--train-types", nargs="+", default=list(d.train_types))
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--last-block", action="store_true", help="also train the last block (default: head only)")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports" / "training")
    args = parser.parse_args()

    config = ExperimentConfig(train_types=tuple(args.train_types), fractions=tuple(args.fractions),
                              seeds=tuple(args.seeds), epochs=args.epochs, last_block=args.last_block)
    setup = Session()  # the repository's own spec, as the commands read it
    data = load_training_set(args.dataset)
    start = time.perf_counter()
    work = BUILD_DIR / "training-experiment" / args.out.name  # models and repositories, one directory per run
    runs = run_experiment(data, setup.spec.preprocess, setup.repository, work, config,
                          log=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "experiment.json").write_text(json.dumps({
        "config": config.__dict__, "dataset": str(args.dataset), "spec": setup.spec.source, "seconds": round(seconds, 1),
        "machine": f"{platform.machine()}, {platform.system()}", "runs": runs_to_json(runs)}, indent=1) + "\n")
    table = render_table(runs)
    (args.out / "table.md").write_text(table)
    print(table)
    print(f"{len(runs)} runs in {seconds:.0f} s; {args.out / 'experiment.json'}")


if __name__ == "__main__":
    main()
