"""The settings of one training run (no heavy imports: the CLI reads its defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.training.preprocess import parse_preprocessing


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Defaults: the deployed preprocessing, all the data, seed 0,
    15 epochs, batch 32, AdamW lr 1e-3 / weight decay 1e-4, head only, augmentation on,
    2 loader workers, on the CPU."""

    preprocessing: str = "deployed"
    """deployed, opencv, torchvision or mix:F (see :mod:`harness.training.preprocess`)."""
    fraction: float = 1.0
    """Share of the training set kept, per class (stratified), drawn with ``seed``."""
    seed: int = 0
    epochs: int = 15
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    last_block: bool = False
    augment: bool = True
    workers: int = 2
    device: str = "cpu"

    def __post_init__(self):
        parse_preprocessing(self.preprocessing)  # raises ValueError for a bad choice
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch size must be at least 1")
