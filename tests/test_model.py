"""The classifier: the real EfficientNet-Lite0 weights, exported to ONNX, and the contract."""

import numpy as np
import onnx
import pytest
import torch

from harness.model import (
    LABELS_FILENAME,
    ONNX_FILENAME,
    ModelError,
    check_onnx,
    import_onnx,
    load_torch_model,
    onnx_session,
    onnx_signature,
    read_labels,
    softmax,
)
from harness.preprocessing import opencv


@pytest.fixture(scope="module")
def onnx_path(repository):
    return repository / "classifier" / ONNX_FILENAME


def test_exported_onnx_meets_the_contract(onnx_path, repository):
    labels = read_labels(repository / "classifier" / LABELS_FILENAME)
    assert len(labels) == 1000 and labels[335] == "fox squirrel" and labels[372] == "baboon"
    check_onnx(onnx_path, (224, 224), labels)
    inputs, outputs = onnx_signature(onnx_path)
    assert [(i.name, i.shape[1:]) for i in inputs] == [("input", (3, 224, 224))]
    assert isinstance(inputs[0].shape[0], str), "batch dimension must be dynamic"
    assert [o.name for o in outputs] == ["logits", "probabilities"]


def test_onnx_runtime_matches_pytorch_on_real_photos(onnx_path, spec, photo):
    session = onnx_session(onnx_path)
    batch = np.stack([opencv.run(photo(n), spec.preprocess)["input"] for n in ("squirrel_cls.jpg", "baboon.jpg", "orange.jpg")])
    logits, probabilities = session.run(None, {"input": batch})
    expected = load_torch_model()(torch.from_numpy(batch)).numpy()
    assert np.abs(logits - expected).max() < 1e-4
    assert np.allclose(probabilities, softmax(logits), atol=1e-6)
    assert list(logits.argmax(1)) == [335, 372, 950]  # fox squirrel, baboon, orange


def test_import_appends_probabilities_to_a_logits_only_model(onnx_path, repository, tmp_path, spec, photo):
    model = onnx.load(str(onnx_path))
    probs = next(o for o in model.graph.output if o.name == "probabilities")
    model.graph.output.remove(probs)
    model.graph.node.remove(next(n for n in model.graph.node if "probabilities" in n.output))
    logits_only = tmp_path / "mine.onnx"
    onnx.save(model, str(logits_only))
    installed = import_onnx(logits_only, repository / "classifier" / LABELS_FILENAME, tmp_path / "classifier", (224, 224))
    session = onnx_session(installed)
    x = opencv.run(photo("squirrel_cls.jpg"), spec.preprocess)["input"][None]
    logits, probabilities = session.run(["logits", "probabilities"], {"input": x})
    assert np.allclose(probabilities, softmax(logits), atol=1e-6)


def test_contract_violations_are_named(onnx_path, repository, tmp_path):
    with pytest.raises(ModelError, match="input 'input' must be float32 \\[batch, 3, 300, 300\\]"):
        check_onnx(onnx_path, (300, 300))
    with pytest.raises(ModelError, match="1000 classes but the label file has 2 lines"):
        check_onnx(onnx_path, (224, 224), labels=["a", "b"])
    with pytest.raises(ModelError, match="not found"):
        check_onnx(tmp_path / "missing.onnx", (224, 224))


def test_the_embedder_is_the_classifiers_features_from_the_same_weights(onnx_path, repository, spec, photo):
    """``harness model export`` writes the pooled 1280-d features too: the classifier's own
    head applied to them gives the classifier's logits (the same weights, cut before the head)."""
    from harness.model import check_embedder_onnx
    from harness.task import get_task

    embedder = repository / get_task("embedding").repository.model / ONNX_FILENAME
    check_embedder_onnx(embedder, (224, 224))
    inputs, outputs = onnx_signature(embedder)
    assert [(i.name, i.shape[1:]) for i in inputs] == [("input", (3, 224, 224))]
    assert [(o.name, o.shape[1:]) for o in outputs] == [("embedding", (1280,))]
    batch = np.stack([opencv.run(photo(n), spec.preprocess)["input"] for n in ("squirrel_cls.jpg", "baboon.jpg")])
    [features] = onnx_session(embedder).run(None, {"input": batch})
    logits = onnx_session(onnx_path).run(["logits"], {"input": batch})[0]
    head = load_torch_model()._fc
    through_head = features @ head.weight.detach().numpy().T + head.bias.detach().numpy()
    assert np.abs(through_head - logits).max() < 1e-3
    assert (features >= 0).all() and features.std() > 0.1  # ReLU6 features, pooled: a real vector


def test_an_embedder_breaking_its_contract_is_named(tmp_path, onnx_path):
    from harness.model import check_embedder_onnx

    with pytest.raises(ModelError, match="embedder not found"):
        check_embedder_onnx(tmp_path / "missing.onnx", (224, 224))
    with pytest.raises(ModelError, match="output 'embedding' must be float32"):
        check_embedder_onnx(onnx_path, (224, 224))  # the classifier: logits, no embedding
