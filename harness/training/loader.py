"""A loader that feeds a PyTorch training loop with the deployed preprocessing.

:class:`TrainingLoader` iterates over labeled samples (from :mod:`harness.training.data`)
and yields :class:`Batch` es: NCHW float32 model inputs made by the chosen preprocessing
(:mod:`harness.training.preprocess`), int64 labels and the image names. In training mode
it shuffles (seeded, per epoch) and applies augmentations after the preprocessing, on the
tensors; in validation mode it does neither, so its tensors are what the server computes.

Data parallel: with ``torch.distributed`` initialized (or ``rank``/``world_size`` given)
each rank iterates over its own shard (:func:`harness.training.data.shard`); call
:meth:`TrainingLoader.set_epoch` each epoch so all ranks shuffle alike. Worker processes
(``workers``) split the rank's shard again; each builds its own DALI pipeline.

A bad image is skipped and counted, never a crash: :attr:`TrainingLoader.skipped` maps its
name to the reason, :attr:`TrainingLoader.routed` counts images per preprocessor.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from harness.accuracy import Sample
from harness.spec import Preprocess
from harness.training.data import shard
from harness.training.preprocess import Preprocessing, PreprocessorFactory, parse_preprocessing


class Batch(NamedTuple):
    inputs: torch.Tensor
    """[batch, 3, H, W] float32 model inputs."""
    labels: torch.Tensor
    """[batch] int64 class indices."""
    names: tuple[str, ...]


class _Chunk(NamedTuple):
    """What a worker hands the loader: a batch (possibly empty) and what it skipped."""

    inputs: torch.Tensor | None
    labels: torch.Tensor | None
    names: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    routed: tuple[tuple[str, int], ...]


class _Samples(IterableDataset):
    """The rank's shard of an epoch, preprocessed and batched in a worker."""

    def __init__(self, samples: Sequence[Sample], factory: PreprocessorFactory, batch_size: int,
                 transform: Callable | None, shuffle: bool, seed: int, rank: int, world_size: int):
        self.samples, self.factory, self.batch_size = tuple(samples), factory, batch_size
        self.transform, self.shuffle, self.seed = transform, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch_counter = None
        """A shared ``multiprocessing.Value`` with the epoch once workers exist (they hold copies of this object)."""
        self.epoch = 0
        self._preprocessors = None

    def current_epoch(self) -> int:
        return self.epoch_counter.value if self.epoch_counter is not None else self.epoch

    def epoch_order(self) -> list[tuple[Sample, str]]:
        """Every sample of this rank for this epoch, with the preprocessor it goes through."""
        order = list(range(len(self.samples)))
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.current_epoch())).permutation(len(self.samples)).tolist()
        # Routing is drawn over the whole epoch before sharding: a sample's route does not
        # depend on the rank or worker count.
        routes = self.factory.route(len(order), seed=(self.seed, self.current_epoch(), 1))
        pairs = [(self.samples[i], route) for i, route in zip(order, routes)]
        return shard(pairs, self.rank, self.world_size)

    def __iter__(self) -> Iterator[_Chunk]:
        if self._preprocessors is None:
            self._preprocessors = self.factory.build()
        pairs = self.epoch_order()
        worker = get_worker_info()
        if worker is not None:
            pairs = pairs[worker.id::worker.num_workers]
        for start in range(0, len(pairs), self.batch_size):
            yield self._chunk(pairs[start:start + self.batch_size])

    def _chunk(self, pairs: Sequence[tuple[Sample, str]]) -> _Chunk:
        results: dict[int, object] = {}
        skipped = []
        for route, preprocessor in self._preprocessors.items():
            indices = [i for i, (_, r) in enumerate(pairs) if r == route]
            readable = []
            for i in indices:
                try:
                    readable.append((i, pairs[i][0].path.read_bytes()))
                except OSError as exc:
                    results[i] = OSError(f"unreadable: {exc.strerror or exc}")
            if readable:
                results.update(zip([i for i, _ in readable], preprocessor([data for _, data in readable])))
        inputs, labels, names = [], [], []
        for i, (sample, _) in enumerate(pairs):
            result = results[i]
            if isinstance(result, Exception):
                skipped.append((sample.name, str(result)))
                continue
            tensor = result if isinstance(result, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(result))
            inputs.append(self.transform(tensor) if self.transform is not None else tensor)
            labels.append(sample.label)
            names.append(sample.name)
        failed = {name for name, _ in skipped}
        routed = Counter(route for sample, route in pairs if sample.name not in failed)
        return _Chunk(torch.stack(inputs) if inputs else None,
                      torch.tensor(labels, dtype=torch.int64) if inputs else None,
                      tuple(names), tuple(skipped), tuple(sorted(routed.items())))


class TrainingLoader:
    """Batches of model inputs and labels for ``samples``, preprocessed as ``preprocessing``.

    Defaults: ``preprocessing="deployed"``, ``batch_size=32``, ``train=False`` (no shuffle,
    no augmentation), ``transform=None`` (with ``train=True``, pass e.g.
    :func:`harness.training.augment.default_augmentations`), ``seed=0``, ``workers=0``
    (preprocess in this process), ``device="cpu"`` (``"cuda[:N]"`` decodes with nvJPEG as
    production does; workers are then not used), rank and world size from
    ``torch.distributed`` when it is initialized, else 0 and 1.

    Workers are started once per loader, by a fork server (``context``, default
    ``"forkserver"``): forking a process that already holds gRPC or DALI threads can
    deadlock, and re-creating workers each epoch would rebuild their DALI pipelines.
    """

    def __init__(self, samples: Sequence[Sample], preprocess: Preprocess, preprocessing: str | Preprocessing = "deployed",
                 batch_size: int = 32, train: bool = False, transform: Callable | None = None, seed: int = 0,
                 workers: int = 0, device: str = "cpu", rank: int | None = None, world_size: int | None = None,
                 context: str = "forkserver"):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        choice = parse_preprocessing(preprocessing) if isinstance(preprocessing, str) else preprocessing
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank = rank if rank is not None else (torch.distributed.get_rank() if distributed else 0)
        world_size = world_size if world_size is not None else (torch.distributed.get_world_size() if distributed else 1)
        factory = PreprocessorFactory(preprocess, choice, batch_size, device)
        self.preprocessing, self.batch_size, self.device = choice, batch_size, device
        self.workers = 0 if device != "cpu" else workers  # CUDA tensors do not cross worker processes
        self.dataset = _Samples(samples, factory, batch_size, transform if train else None, train, seed, rank, world_size)
        self.skipped: dict[str, str] = {}
        """Image name -> why it was skipped (accumulates over epochs; a name appears once)."""
        self.routed: Counter[str] = Counter()
        """Preprocessor name -> images it preprocessed (accumulates over epochs)."""
        self._context = context
        self._workers_loader: DataLoader | None = None

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same order on every rank)."""
        self.dataset.epoch = epoch
        if self.dataset.epoch_counter is not None:
            self.dataset.epoch_counter.value = epoch

    def __len__(self) -> int:
        """Batches per epoch on this rank, before skipping (an upper bound with workers)."""
        per_rank = len(shard(range(len(self.dataset.samples)), self.dataset.rank, self.dataset.world_size))
        if self.workers <= 1:
            return -(-per_rank // self.batch_size)
        return sum(-(-len(range(w, per_rank, self.workers)) // self.batch_size) for w in range(self.workers))

    def __iter__(self) -> Iterator[Batch]:
        for chunk in self.dataset if self.workers == 0 else self._worker_pool():
            self.skipped.update(chunk.skipped)
            self.routed.update(dict(chunk.routed))
            if chunk.inputs is not None:
                yield Batch(chunk.inputs, chunk.labels, chunk.names)

    def _worker_pool(self) -> DataLoader:
        if self._workers_loader is None:
            context = torch.multiprocessing.get_context(self._context)
            self.dataset.epoch_counter = context.Value("i", self.dataset.epoch)
            self._workers_loader = DataLoader(self.dataset, batch_size=None, num_workers=self.workers,
                                              persistent_workers=True, multiprocessing_context=context)
        return self._workers_loader
