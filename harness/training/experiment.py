"""The train/serve mismatch experiment (torchpipe's training-integration table, on real data).

For each training preprocessing (default: ``torchvision``, the common PIL recipe, and
``deployed``, the DALI graph the server runs), each share of the training data (default
100% and 5%) and each seed, fine-tune EfficientNet-Lite0's head, export it, serve it with
the embedded Triton, and classify the validation set three ways: in-process with the
training preprocessing (the reference), through ``classify_dali`` and through
``classify_opencv``. Each run is scored by :func:`harness.accuracy.evaluate` (accuracy,
macro recall and precision, flips and McNemar against the in-process path); the table
gives mean +- sample standard deviation over seeds.

Cost control: the backbone is frozen and nothing is augmented, so its features are
computed once per (training preprocessing, image) and shared by every seed and fraction;
what remains per run is training a linear head and one server start.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from harness.accuracy import REFERENCE, Predictions, evaluate, predict_deployed, top_k_classes
from harness.client import PIPELINES, TritonClient
from harness.deployment import pipeline_side
from harness.spec import Preprocess
from harness.task import get_task
from harness.training.config import TrainConfig
from harness.training.data import TrainingSet, stratified_fraction
from harness.training.deploy import serve_trained
from harness.training.train import (
    EpochStats,
    Features,
    TrainResult,
    export,
    extract_features,
    fit_head,
    head_logits,
    loader_for,
    new_net,
)

IN_PROCESS = "in-process"


@dataclass(frozen=True)
class ExperimentConfig:
    """Defaults: torchvision and deployed training, 100% and 5% of the data, seeds 0-4,
    40 epochs of batch 16 at lr 1e-3 (head only, no augmentation), 2 loader workers."""

    train_types: tuple[str, ...] = ("torchvision", "deployed")
    fractions: tuple[float, ...] = (1.0, 0.05)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    epochs: int = 40
    batch_size: int = 16
    lr: float = 1e-3
    workers: int = 2
    last_block: bool = False
    """Also train the last MBConv block (its input is what gets cached then)."""


@dataclass(frozen=True)
class PathResult:
    path: str
    """in-process, classify_dali or classify_opencv."""
    accuracy: float
    recall: float
    precision: float
    flips: int | None
    mcnemar_b: int | None
    mcnemar_c: int | None
    mcnemar_p: float | None


@dataclass(frozen=True)
class RunResult:
    train_type: str
    fraction: float
    seed: int
    train_images: int
    """Images the head was trained on (the fraction's draw, less any the loader skipped)."""
    val_images: int
    final: EpochStats
    paths: tuple[PathResult, ...]
    """In-process first."""


def run_experiment(data: TrainingSet, preprocess: Preprocess, repository: Path, work: Path,
                   config: ExperimentConfig = ExperimentConfig(),
                   log: Callable[[str], None] = print) -> list[RunResult]:
    """Every (training preprocessing, fraction, seed) run; ``work`` receives models and repositories."""
    if data.val is None:
        raise ValueError("the experiment needs a val/ set")
    runs = []
    for train_type in config.train_types:
        base = TrainConfig(preprocessing=train_type, epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                           last_block=config.last_block, augment=False, workers=config.workers)
        start = time.perf_counter()
        net = new_net(len(data.classes), last_block=config.last_block, seed=0)
        train_features = extract_features(net, loader_for(data.train.samples, preprocess, base, train=False))
        val_loader = loader_for(data.val.samples, preprocess, base, train=False)
        val_features = extract_features(net, val_loader)
        log(f"{train_type}: features of {len(train_features.names)} training and {len(val_features.names)} validation "
            f"images in {time.perf_counter() - start:.1f} s")
        for fraction in config.fractions:
            for seed in config.seeds:
                run_config = TrainConfig(**{**base.__dict__, "fraction": fraction, "seed": seed})
                run = _one_run(data, preprocess, repository, work, run_config, train_features, val_features,
                               dict(val_loader.skipped))
                runs.append(run)
                log(f"{train_type} {100 * fraction:g}% seed {seed}: " + ", ".join(
                    f"{p.path} acc {100 * p.accuracy:.2f}%" for p in run.paths))
    return runs


def _one_run(data: TrainingSet, preprocess: Preprocess, repository: Path, work: Path, config: TrainConfig,
             train_features: Features, val_features: Features, val_skipped: dict[str, str]) -> RunResult:
    samples = stratified_fraction(data.train.samples, config.fraction, config.seed)
    net = new_net(len(data.classes), last_block=config.last_block, seed=config.seed)
    features = train_features.subset([s.name for s in samples])  # without the images the loader skipped
    history = fit_head(net, features, config)
    model_dir = work / f"{config.preprocessing}-{100 * config.fraction:g}pct-seed{config.seed}"
    export(net, model_dir, TrainResult(config, data.classes, len(samples), history), preprocess)
    logits = head_logits(net, val_features)
    predictions = [Predictions(REFERENCE, dict(zip(val_features.names, top_k_classes(logits))), val_skipped)]
    with serve_trained(repository, model_dir, model_dir / "serving") as server:
        with TritonClient(server.url("grpc"), "grpc") as client:
            predictions += [predict_deployed(data.val.samples, pipeline_side(client, pipeline, get_task(None)))
                            for pipeline in PIPELINES]
    result = evaluate(data.val, predictions, data.classes)
    paths = []
    for score in result.scores:
        name = IN_PROCESS if score.path == REFERENCE else PIPELINES[score.path].ensemble
        m = score.mcnemar
        paths.append(PathResult(name, score.top1, score.recall, score.precision, score.flips,
                                m.b if m else None, m.c if m else None, m.p_value if m else None))
    return RunResult(config.preprocessing, config.fraction, config.seed, len(features.names), len(result.evaluated),
                     history[-1], tuple(paths))


# -- the table -----------------------------------------------------------------------------

TABLE_COLUMNS = ("index", "train type", "inference path", "recall", "diff", "precision", "diff", "accuracy", "diff",
                 "flip rate", "McNemar b/c (all seeds), p")


def _mean_sd(values: Sequence[float]) -> str:
    """Percent points: mean +- sample standard deviation."""
    values = [100 * v for v in values]
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {sd:.2f}"


def _diff(values: Sequence[float]) -> str:
    values = [100 * v for v in values]
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:+.2f} ± {sd:.2f}"


def render_table(runs: Sequence[RunResult]) -> str:
    """The seed's table: one row per (fraction, training preprocessing, inference path),
    metrics as mean ± SD over seeds in percent, diffs against the in-process path per seed."""
    from scipy.stats import binomtest

    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|---:|---|---|" + "---:|" * (len(TABLE_COLUMNS) - 3)]
    index = 0
    groups: dict[tuple[float, str], list[RunResult]] = {}
    for run in runs:
        groups.setdefault((run.fraction, run.train_type), []).append(run)
    for (fraction, train_type), group in sorted(groups.items(), key=lambda kv: -kv[0][0]):
        seeds = len(group)
        for position, path in enumerate(p.path for p in group[0].paths):
            rows = [run.paths[position] for run in group]
            refs = [run.paths[0] for run in group]
            sizes = sorted({run.train_images for run in group})
            images = "-".join(map(str, sizes[::len(sizes) - 1 or 1]))
            cells = [str(index), f"{train_type}, {100 * fraction:g}% data ({images} images), {seeds} seeds",
                     path]
            for key in ("recall", "precision", "accuracy"):
                cells.append(_mean_sd([getattr(r, key) for r in rows]))
                cells.append("" if position == 0 else _diff([getattr(r, key) - getattr(ref, key)
                                                             for r, ref in zip(rows, refs)]))
            if position == 0:
                cells += ["", ""]
            else:
                flips = sum(r.flips for r in rows)
                total = sum(run.val_images for run in group)
                b, c = sum(r.mcnemar_b for r in rows), sum(r.mcnemar_c for r in rows)
                p = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
                cells += [f"{100 * flips / total:.2f}% ({flips}/{total})", f"{b}/{c}, p = {min(p, 1.0):.3g}"]
            lines.append("| " + " | ".join(cells) + " |")
            index += 1
    return "\n".join(lines) + "\n"


def runs_to_json(runs: Sequence[RunResult]) -> list[dict]:
    from dataclasses import asdict

    return [asdict(run) for run in runs]
