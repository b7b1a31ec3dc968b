"""The training loader: deployed tensors equal the server's, bad images skipped and
counted, mixing, shuffling, augmentation, and data-parallel sharding (gloo, two processes)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from harness.client import TritonClient
from harness.compare.tolerance import tolerances_for
from harness.training.augment import FromPixels, ToPixels, default_augmentations
from harness.training.data import load_training_set
from harness.training.loader import TrainingLoader


@pytest.fixture(scope="module")
def val_samples(tiny_set):
    return load_training_set(tiny_set).val.samples


@pytest.mark.parametrize("preprocessing, pipeline", [("deployed", "dali"), ("opencv", "opencv")])
def test_validation_tensors_equal_the_servers_input_tap(server, spec, val_samples, preprocessing, pipeline):
    loader = TrainingLoader(val_samples, spec.preprocess, preprocessing, batch_size=4)
    batches = list(loader)
    inputs = torch.cat([b.inputs for b in batches]).numpy()
    names = sum((b.names for b in batches), ())
    assert names == tuple(s.name for s in val_samples) and not loader.skipped
    atol = tolerances_for(spec.preprocess, drift=True)["input"].atol  # the strict rule: one level
    with TritonClient(server.url("grpc"), "grpc") as client:
        for sample, tensor in zip(val_samples, inputs):
            deployed = client.stages(sample.path.read_bytes(), pipeline, ["input"])["input"]
            assert deployed.shape == tensor.shape == (3, 224, 224)
            assert np.max(np.abs(deployed - tensor)) <= atol, sample.name


def test_torchvision_recipe_is_not_the_deployed_one(spec, val_samples):
    deployed = next(iter(TrainingLoader(val_samples[:2], spec.preprocess, "deployed"))).inputs
    torchvision = next(iter(TrainingLoader(val_samples[:2], spec.preprocess, "torchvision"))).inputs
    assert deployed.shape == torchvision.shape
    # PIL's antialiased resize against DALI's plain bilinear: many levels apart on real photos.
    assert float((deployed - torchvision).abs().max()) > 10 / 128


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_images_are_skipped_and_counted(spec, tiny_set, tmp_path, workers):
    root = tmp_path / "set"
    shutil.copytree(tiny_set / "val", root)
    (root / "ants" / "notes.jpg").write_text("not an image")
    good = sorted((root / "bees").iterdir())[0]
    (root / "bees" / "truncated.jpg").write_bytes(good.read_bytes()[:4000])
    samples = load_training_set(root).train.samples
    loader = TrainingLoader(samples, spec.preprocess, "deployed", batch_size=3, workers=workers)
    names = [n for batch in loader for n in batch.names]
    assert sorted(names) == sorted(s.name for s in samples if s.name not in ("ants/notes.jpg", "bees/truncated.jpg"))
    assert set(loader.skipped) == {"ants/notes.jpg", "bees/truncated.jpg"}
    assert "truncated JPEG" in loader.skipped["bees/truncated.jpg"]
    assert loader.routed == {"deployed": len(names)}


def test_mix_routes_a_seeded_share_through_opencv(spec, tiny_set):
    samples = load_training_set(tiny_set).train.samples + load_training_set(tiny_set).val.samples
    for fraction, expected in ((0.0, {"deployed": 14}), (1.0, {"opencv": 14})):
        loader = TrainingLoader(samples, spec.preprocess, f"mix:{fraction}", batch_size=8)
        list(loader)
        assert loader.routed == expected
    counts = []
    for workers in (0, 2):
        loader = TrainingLoader(samples, spec.preprocess, "mix:0.5", batch_size=8, seed=1, workers=workers)
        list(loader)
        counts.append(loader.routed)
    assert counts[0] == counts[1] and counts[0]["opencv"] > 0 and counts[0]["deployed"] > 0


def test_training_mode_shuffles_per_epoch_and_augments(spec, val_samples):
    def epoch(seed, number, transform=None):
        loader = TrainingLoader(val_samples, spec.preprocess, "opencv", batch_size=6, train=True, seed=seed,
                                transform=transform)
        loader.set_epoch(number)
        return next(iter(loader))

    assert epoch(0, 0).names == epoch(0, 0).names
    assert epoch(0, 0).names != epoch(0, 1).names or epoch(0, 0).names != epoch(1, 0).names
    plain = epoch(0, 0)
    torch.manual_seed(0)
    augmented = epoch(0, 0, default_augmentations(spec.preprocess))
    assert augmented.names == plain.names and augmented.inputs.shape == plain.inputs.shape
    assert not torch.allclose(augmented.inputs, plain.inputs)
    # Validation mode never augments, whatever transform is given.
    validation = TrainingLoader(val_samples, spec.preprocess, "opencv", batch_size=6,
                                transform=default_augmentations(spec.preprocess))
    assert torch.equal(next(iter(validation)).inputs, next(iter(TrainingLoader(val_samples, spec.preprocess, "opencv",
                                                                               batch_size=6))).inputs)


def test_pixel_round_trip_is_exact(spec):
    x = torch.randn(3, 224, 224)
    pixels = ToPixels(spec.preprocess)(x)
    assert torch.allclose(FromPixels(spec.preprocess)(pixels), x, atol=1e-5)


def _ddp_worker(rank: int, world_size: int, port: int, samples, preprocess, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = TrainingLoader(samples, preprocess, "deployed", batch_size=2, train=True, seed=5)
        names = []
        for batch in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch.inputs.mean(dim=(2, 3))), batch.labels)
            loss.backward()  # DDP averages the gradients over both ranks
            optimizer.step()
            names += batch.names
        gathered = [None] * world_size
        dist.all_gather_object(gathered, (names, [p.detach().clone() for p in model.parameters()]))
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


def test_ddp_two_processes_gloo_each_rank_gets_its_own_shard(spec, tiny_set, tmp_path):
    from harness.server import free_port

    samples = load_training_set(tiny_set).train.samples  # 8 photos: 4 per rank
    out = tmp_path / "gathered.pt"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, free_port(), samples, spec.preprocess, out), nprocs=2)
    (names0, params0), (names1, params1) = torch.load(out)
    assert len(names0) == len(names1) == 4
    assert set(names0).isdisjoint(names1) and set(names0) | set(names1) == {s.name for s in samples}
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))  # in step: one model, two shards
