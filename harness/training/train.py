"""Fine-tune EfficientNet-Lite0 on a labeled image set, fed by :class:`TrainingLoader`.

Only the classifier head is trained (a new linear layer for the dataset's classes), or
the head and the last MBConv block with the final 1x1 convolution (``last_block``). The
rest is frozen, so its output for an image never changes: it is computed once per image
and cached whenever that is exact (no augmentation), which makes each epoch nearly free
on a CPU. With augmentation the frozen part runs every epoch on the augmented tensors.
Batch-norm statistics stay frozen (with a few hundred images, batch statistics are noise).

The result is exported as ``model.onnx`` and ``labels.txt`` meeting the classifier
contract of :mod:`harness.model`, ready for ``harness model import``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from harness.accuracy import Sample
from harness.files import strict_json, write_atomic
from harness.model import LABELS_FILENAME, ONNX_FILENAME, export_module
from harness.spec import Preprocess
from harness.training.augment import default_augmentations
from harness.training.config import TrainConfig
from harness.training.data import TrainingSet, stratified_fraction
from harness.training.loader import TrainingLoader

SUMMARY_FILENAME = "training.json"


@dataclass(frozen=True)
class EpochStats:
    epoch: int
    loss: float
    train_accuracy: float
    val_accuracy: float | None


@dataclass(frozen=True)
class TrainResult:
    config: TrainConfig
    classes: tuple[str, ...]
    train_images: int
    """Images kept after ``fraction`` (before skipping bad ones)."""
    history: tuple[EpochStats, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    """Image name -> why the loader skipped it."""
    seconds: float = 0.0


class FineTuneNet(torch.nn.Module):
    """EfficientNet-Lite0 (ImageNet weights) with a new head for ``num_classes``.

    ``frozen(x)`` is the part that is not trained, ``head(h)`` the part that is;
    ``forward(x) = head(frozen(x))`` is what gets exported."""

    def __init__(self, num_classes: int, last_block: bool = False):
        super().__init__()
        from harness.model import load_torch_model

        base = load_torch_model()
        torch.set_grad_enabled(True)  # load_torch_model switches autograd off process-wide
        self.last_block = last_block
        self.act = base._swish  # ReLU6 in the Lite models
        self.stem = torch.nn.Sequential(base._conv_stem, base._bn0)
        blocks = list(base._blocks)
        self.blocks = torch.nn.ModuleList(blocks[:-1])
        self.block = blocks[-1]
        self.conv_head = torch.nn.Sequential(base._conv_head, base._bn1)
        self.dropout = torch.nn.Dropout(base._global_params.dropout_rate)
        self.fc = torch.nn.Linear(base._fc.in_features, num_classes)
        for module in self.frozen_modules():
            module.requires_grad_(False)

    def frozen_modules(self) -> list[torch.nn.Module]:
        frozen = [self.stem, self.blocks]
        return frozen if self.last_block else frozen + [self.block, self.conv_head]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def train(self, mode: bool = True):
        super().train(mode)
        for module in self.modules():  # frozen batch-norm statistics, also in the trained block
            if isinstance(module, torch.nn.BatchNorm2d):
                module.eval()
        return self

    def frozen(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.stem(x))
        for block in self.blocks:
            x = block(x)
        return x if self.last_block else self._pool(self.block(x))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        if self.last_block:
            h = self._pool(self.block(h))
        return self.fc(self.dropout(h))

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv_head(x)).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.frozen(x))


def new_net(num_classes: int, last_block: bool, seed: int) -> FineTuneNet:
    """A :class:`FineTuneNet` whose new head is initialized from ``seed``."""
    torch.manual_seed(seed)
    return FineTuneNet(num_classes, last_block)


@dataclass(frozen=True)
class Features:
    """The frozen part's outputs for a set of images, with their labels and names."""

    values: torch.Tensor
    labels: torch.Tensor
    names: tuple[str, ...]

    def subset(self, names: Sequence[str]) -> "Features":
        index = {n: i for i, n in enumerate(self.names)}
        rows = [index[n] for n in names if n in index]
        return Features(self.values[rows], self.labels[rows], tuple(self.names[i] for i in rows))


def extract_features(net: FineTuneNet, loader: TrainingLoader, on_batch: Callable[[int], None] = lambda n: None) -> Features:
    """Run the frozen part over every batch of ``loader`` (no gradients)."""
    net.eval()
    values, labels, names = [], [], []
    with torch.no_grad():
        for batch in loader:
            values.append(net.frozen(batch.inputs.to(_device(net))).cpu())
            labels.append(batch.labels)
            names += batch.names
            on_batch(len(batch.names))
    if not values:
        raise ValueError("no image of the set could be preprocessed")
    return Features(torch.cat(values), torch.cat(labels), tuple(names))


def fit_head(net: FineTuneNet, train: Features | TrainingLoader, config: TrainConfig, val: Features | None = None,
             on_epoch: Callable[[EpochStats], None] = lambda s: None,
             on_batch: Callable[[int], None] = lambda n: None) -> tuple[EpochStats, ...]:
    """Train the head for ``config.epochs`` on cached features, or on a loader's batches
    (augmented) run through the frozen part each epoch. Cross-entropy, AdamW."""
    optimizer = torch.optim.AdamW(net.trainable_parameters(), lr=config.lr, weight_decay=config.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    for epoch in range(config.epochs):
        net.train()
        total, correct, loss_sum = 0, 0, 0.0
        for h, y in _epoch_batches(net, train, config.batch_size, epoch, generator):
            optimizer.zero_grad()
            logits = net.head(h)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            total += len(y)
            correct += int((logits.argmax(1) == y).sum())
            loss_sum += loss.item() * len(y)
            on_batch(len(y))
        stats = EpochStats(epoch + 1, loss_sum / max(total, 1), correct / max(total, 1),
                           accuracy(net, val) if val is not None else None)
        history.append(stats)
        on_epoch(stats)
    net.eval()
    return tuple(history)


def _epoch_batches(net: FineTuneNet, train: Features | TrainingLoader, batch_size: int, epoch: int,
                   generator: torch.Generator):
    if isinstance(train, Features):
        order = torch.randperm(len(train.labels), generator=generator)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            yield train.values[rows].to(_device(net)), train.labels[rows].to(_device(net))
        return
    train.set_epoch(epoch)
    for batch in train:
        with torch.no_grad():
            h = net.frozen(batch.inputs.to(_device(net)))
        yield h, batch.labels.to(_device(net))


def head_logits(net: FineTuneNet, features: Features) -> np.ndarray:
    net.eval()
    with torch.no_grad():
        return net.head(features.values.to(_device(net))).cpu().numpy()


def accuracy(net: FineTuneNet, features: Features) -> float:
    return float(np.mean(head_logits(net, features).argmax(1) == features.labels.numpy()))


def _device(net: torch.nn.Module) -> torch.device:
    return next(net.parameters()).device


def loader_for(samples: Sequence[Sample], preprocess: Preprocess, config: TrainConfig, train: bool) -> TrainingLoader:
    """The loader a run uses: training mode (shuffled, augmented) or validation mode."""
    transform = default_augmentations(preprocess) if train and config.augment else None
    return TrainingLoader(samples, preprocess, config.preprocessing, batch_size=config.batch_size, train=train,
                          transform=transform, seed=config.seed, workers=config.workers, device=config.device)


def train(data: TrainingSet, preprocess: Preprocess, config: TrainConfig,
          progress: Callable[[str, int, int], None] = lambda stage, done, total: None,
          on_epoch: Callable[[EpochStats], None] = lambda s: None) -> tuple[FineTuneNet, TrainResult]:
    """Fine-tune on ``data.train`` (``config.fraction`` of it), validating on ``data.val``.
    ``progress(stage, images_done, images_total)`` is called as images go through."""
    start = time.perf_counter()
    samples = stratified_fraction(data.train.samples, config.fraction, config.seed)
    net = new_net(len(data.classes), config.last_block, config.seed).to(config.device)
    counter = _Counter(progress)
    val = None
    if data.val is not None:
        val_loader = loader_for(data.val.samples, preprocess, config, train=False)
        val = extract_features(net, val_loader, counter.start("validation features", len(data.val.samples)))
    train_loader = loader_for(samples, preprocess, config, train=True)
    if config.augment:
        history = fit_head(net, train_loader, config, val, on_epoch,
                           counter.start("training", len(samples) * config.epochs))
    else:
        cache_loader = loader_for(samples, preprocess, config, train=False)
        features = extract_features(net, cache_loader, counter.start("training features", len(samples)))
        history = fit_head(net, features, config, val, on_epoch)
        train_loader = cache_loader
    skipped = dict(train_loader.skipped)
    if data.val is not None:
        skipped.update(val_loader.skipped)
    return net, TrainResult(config, data.classes, len(samples), history, skipped, time.perf_counter() - start)


class _Counter:
    def __init__(self, progress: Callable[[str, int, int], None]):
        self.progress = progress

    def start(self, stage: str, total: int) -> Callable[[int], None]:
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            self.progress(stage, done[0], total)

        self.progress(stage, 0, total)
        return advance


def export(net: FineTuneNet, out_dir: Path, result: TrainResult, preprocess: Preprocess) -> Path:
    """Write ``model.onnx``, ``labels.txt`` and ``training.json`` (config, history, skipped
    images) into ``out_dir``; returns the ONNX path."""
    net = net.cpu().eval()
    with warnings.catch_warnings():  # the TorchScript exporter's constant-folding notes say nothing to a user
        warnings.simplefilter("ignore", UserWarning)
        onnx_path = export_module(net, out_dir, list(result.classes), tuple(preprocess.crop.size))
    summary = {
        "config": asdict(result.config), "classes": list(result.classes), "train_images": result.train_images,
        "history": [asdict(s) for s in result.history], "skipped": result.skipped,
        "seconds": round(result.seconds, 2), "files": [ONNX_FILENAME, LABELS_FILENAME],
    }
    write_atomic(out_dir / SUMMARY_FILENAME, strict_json(summary, indent=1) + "\n")
    return onnx_path
