"""Fine-tuning: the split network computes what EfficientNet-Lite0 computes, and a short
head-only run learns ants vs bees."""

from __future__ import annotations

import pytest
import torch

from harness.model import load_torch_model
from harness.training.data import load_training_set
from harness.training.train import FineTuneNet, TrainConfig, train


@pytest.mark.parametrize("last_block", [False, True])
def test_split_network_equals_the_original(last_block):
    base = load_torch_model()
    net = FineTuneNet(1000, last_block)
    net.fc = base._fc
    net.eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert torch.allclose(net(x), base(x), atol=1e-5)
    trainable = {name.split(".")[0] for name, p in net.named_parameters() if p.requires_grad}
    assert trainable == ({"fc", "block", "conv_head"} if last_block else {"fc"})


def test_head_only_training_learns_and_reports(spec, tiny_set):
    data = load_training_set(tiny_set)
    config = TrainConfig(epochs=12, batch_size=4, lr=3e-3, augment=False, workers=0, seed=1)
    net, result = train(data, spec.preprocess, config)
    assert result.train_images == 8 and not result.skipped
    assert [s.epoch for s in result.history] == list(range(1, 13))
    assert result.history[-1].loss < result.history[0].loss
    assert result.history[-1].train_accuracy == 1.0
    assert result.history[-1].val_accuracy >= 4 / 6  # ImageNet features tell ants from bees


def test_last_block_training_moves_the_block_and_exports_what_torch_computes(spec, tiny_set, tmp_path):
    import numpy as np

    from harness.model import onnx_session
    from harness.training.train import export

    data = load_training_set(tiny_set)
    before = FineTuneNet(2, last_block=True).block.state_dict()
    config = TrainConfig(epochs=2, batch_size=4, last_block=True, augment=False, workers=0)
    net, result = train(data, spec.preprocess, config)
    after = net.block.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if "weight" in k)
    export(net, tmp_path, result, spec.preprocess)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = net(x).numpy()
    logits = onnx_session(tmp_path / "model.onnx").run(["logits"], {"input": x.numpy()})[0]
    assert np.max(np.abs(logits - expected)) < 1e-4
