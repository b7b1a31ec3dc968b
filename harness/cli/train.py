"""``harness train``: fine-tune EfficientNet-Lite0 on an ImageFolder with a chosen preprocessing."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from harness.accuracy import DatasetError
from harness.arguments import Groups, RepositoryArgs, epilog, make_session
from harness.cli.common import console, out
from harness.errors import UsageError
from harness.names import printable
from harness.paths import WORK_DIR
from harness.training.config import TrainConfig
from harness.training.data import load_training_set
from harness.training.preprocess import CHOICES
from harness.validation import COUNT, SEED, THREADS, Number, Whole

DEFAULT_OUT = WORK_DIR / "trained"


def register(commands: argparse._SubParsersAction) -> None:
    d = TrainConfig()
    train = commands.add_parser(
        "train", help="fine-tune EfficientNet-Lite0 on an ImageFolder with the deployed (or another) preprocessing",
        description="Fine-tune the default EfficientNet-Lite0's classifier head (optionally also its last block) on "
                    "DATASET: an ImageFolder directory (one sub-directory per class), a CSV of file,label rows, or a "
                    "directory holding train/ (and val/, used for validation) in one of those layouts. Images are "
                    "preprocessed by the deployed DALI graph (CPU decoder here, nvJPEG with --device cuda), by "
                    "OpenCV, by torchvision's PIL recipe, or a mix. Writes model.onnx and labels.txt (for `harness "
                    "model import`) and training.json. Images that cannot be read are skipped, counted and listed.",
        epilog=epilog("trained", None, "usage or setup error"))
    train.add_argument("dataset", type=Path, metavar="DATASET", help="the training images (see above)")
    train.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    train.add_argument("--preprocessing", default=d.preprocessing, metavar="|".join((*CHOICES, "mix:F")),
                       help="training preprocessing; mix:F sends a share F of the images through OpenCV and the rest "
                            "through the deployed graph (default: %(default)s)")
    train.add_argument("--fraction", type=Number(None, 1.0, above=0.0), default=d.fraction,
                       help="keep this share of each class of the training set, drawn with --seed (default: %(default)s)")
    train.add_argument("--seed", type=SEED, default=d.seed,
                       help="seeds the subset, shuffling, augmentation and head initialization (default: %(default)s)")
    train.add_argument("--epochs", type=COUNT, default=d.epochs, help="passes over the training set (default: %(default)s)")
    train.add_argument("--batch-size", type=COUNT, default=d.batch_size,
                       help="images per training step (default: %(default)s)")
    train.add_argument("--lr", type=Number(None, 1.0, above=0.0), default=d.lr, help="AdamW learning rate (default: %(default)s)")
    train.add_argument("--last-block", action="store_true",
                       help="also train the last MBConv block and the final 1x1 convolution (default: the head only)")
    train.add_argument("--no-augment", dest="augment", action="store_false",
                       help="no random crop/flip/color jitter: the frozen backbone's features are then computed once "
                            "per image and cached (much faster on a CPU)")
    train.add_argument("--workers", type=Whole(0, THREADS.maximum), default=d.workers,
                       help="images prepared in parallel: loader worker processes (default: %(default)s)")
    train.add_argument("--device", default=d.device, help="cpu, cuda or cuda:N (default: %(default)s)")
    train.add_argument("--serve-repository", type=Path, default=None, metavar="DIR",
                       help="also write a copy of the model repository serving the trained model (class count set "
                            "in the classifier and ensemble configs) to DIR")
    groups = Groups(train, repository=RepositoryArgs())
    train.set_defaults(run=lambda args: run_train_command(args, groups))


def run_train_command(args, groups: Groups) -> int:
    try:
        config = TrainConfig(preprocessing=args.preprocessing, fraction=args.fraction, seed=args.seed,
                             epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, last_block=args.last_block,
                             augment=args.augment, workers=args.workers, device=args.device)
        data = load_training_set(args.dataset)
    except (ValueError, DatasetError) as exc:
        raise UsageError(str(exc)) from None
    paths = groups.parse(args).repository
    spec = make_session(paths).spec
    from harness.training.train import export, train  # here: loads torch only when called

    def on_epoch(stats) -> None:
        val = f", val accuracy {100 * stats.val_accuracy:.1f}%" if stats.val_accuracy is not None else ""
        console.print(f"epoch {stats.epoch}/{config.epochs}: loss {stats.loss:.4f}, "
                      f"train accuracy {100 * stats.train_accuracy:.1f}%{val}")

    console.print(f"training on {args.dataset}: {len(data.classes)} classes ({', '.join(data.classes)}), "
                  f"{len(data.train.samples)} training images"
                  + (f", {len(data.val.samples)} validation images" if data.val else ", no val/")
                  + f"; preprocessing {config.preprocessing}")
    with _stage_progress() as progress:
        try:
            net, result = train(data, spec.preprocess, config, progress, on_epoch)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    onnx_path = export(net, args.out, result, spec.preprocess)
    if result.skipped:
        console.print(f"[yellow]{len(result.skipped)} image(s) skipped[/]:", markup=True)
        for name, reason in result.skipped.items():
            console.print(printable(f"  {name}: {reason}"))
    last = result.history[-1]
    out(f"model: {onnx_path}\nlabels: {args.out / 'labels.txt'}\n"
        f"trained on {result.train_images} images ({100 * config.fraction:g}% of the training set), "
        f"{len(result.skipped)} skipped, {result.seconds:.1f} s; final loss {last.loss:.4f}"
        + (f", val accuracy {100 * last.val_accuracy:.2f}%" if last.val_accuracy is not None else ""))
    if args.serve_repository:
        from harness.training.deploy import install_classifier

        install_classifier(paths.repository, args.out, args.serve_repository, paths.spec)
        out(f"repository serving it: {args.serve_repository}")
    return 0


@contextlib.contextmanager
def _stage_progress():
    """A progress bar per stage (features, training); yields ``progress(stage, done, total)``."""
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)

        yield progress
