"""Training-loader throughput: the deployed-DALI loader vs the OpenCV loader vs torchvision's
``ImageFolder`` + ``DataLoader``, images/s with 2 worker processes.

Validation-style preprocessing (no augmentation) of ``../shared/datasets/hymenoptera/train``
(245 photos of many sizes) to NCHW float32 batches of 32, by the spec's parameters:
``harness.training.TrainingLoader`` with ``deployed`` (the DALI graph, CPU decoder) and
``opencv``; torchvision with ``Resize(256)`` (PIL, antialiased), ``CenterCrop(224)``,
``ToTensor``, ``Normalize``. Each loader runs one warm-up epoch (workers start, pipelines
build), then ``--epochs`` timed epochs. A benchmark, run once; numbers depend on the load
of the machine.

    .venv/bin/python benchmarks/loader_throughput.py [--epochs 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from harness.paths import PROJECT_ROOT
from harness.session import Session
from harness.training.data import load_training_set
from harness.training.loader import TrainingLoader

DEFAULT_DATASET = PROJECT_ROOT.parent / "shared" / "datasets" / "hymenoptera"


def torchvision_loader(root: Path, p, batch_size: int, workers: int):
    from torchvision import datasets, transforms

    mean, std = p.normalize.mean_std_in_pixels()
    transform = transforms.Compose([
        transforms.Resize(p.resize.size[0]), transforms.CenterCrop(list(p.crop.size)), transforms.ToTensor(),
        transforms.Normalize([m / 255 for m in mean], [s / 255 for s in std]),
    ])
    return torch.utils.data.DataLoader(datasets.ImageFolder(str(root), transform), batch_size=batch_size,
                                       num_workers=workers, persistent_workers=workers > 0)


def images_per_second(loader, epochs: int) -> tuple[float, float, int]:
    """(warm-up epoch seconds, timed images/s, images per epoch)."""
    start = time.perf_counter()
    count = sum(len(batch[1]) for batch in loader)
    warm_up = time.perf_counter() - start
    start = time.perf_counter()
    for epoch in range(epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch + 1)
        for batch in loader:
            assert batch[0].dtype == torch.float32 and batch[0].shape[1:] == (3, 224, 224)
    return warm_up, count * epochs / (time.perf_counter() - start), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    p = Session().spec.preprocess
    samples = load_training_set(args.dataset).train.samples
    loaders = {
        "deployed DALI (CPU decoder), harness loader": TrainingLoader(
            samples, p, "deployed", batch_size=args.batch_size, workers=args.workers),
        "OpenCV, harness loader": TrainingLoader(samples, p, "opencv", batch_size=args.batch_size, workers=args.workers),
        "torchvision ImageFolder + DataLoader (PIL)": torchvision_loader(
            args.dataset / "train", p, args.batch_size, args.workers),
    }
    print(f"| loader | workers | images/epoch | warm-up epoch s | images/s ({args.epochs} epochs) |")
    print("|---|---:|---:|---:|---:|")
    for name, loader in loaders.items():
        warm_up, rate, count = images_per_second(loader, args.epochs)
        print(f"| {name} | {args.workers} | {count} | {warm_up:.1f} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    main()
