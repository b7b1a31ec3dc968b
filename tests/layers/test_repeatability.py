"""Repeatability and batch invariance: the cpu profile measured for real under concurrent load,
and a planted non-deterministic model (it adds noise) caught."""

from __future__ import annotations

import pytest

from harness.client import TritonClient
from harness.compare.tolerance import DRIFT_TOLERANCES, tolerances_for
from harness.layers.repeatability import Probe, check_repeatability, repository_probes
from harness.server import TritonServer, free_port
from harness.session import Session
from harness.stage import Stage

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg"]

NOISY_CONFIG = """name: "noisy"
backend: "python"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# A test-only classifier whose answer depends on chance: channel means as scores, plus
# Gaussian noise of 1.0 per call (the planted non-deterministic step).
NOISY_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.rng = np.random.default_rng()

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            scores = np.zeros((len(x), 1000), np.float32)
            scores[:, :3] = x.mean(axis=(2, 3))
            scores += self.rng.normal(0.0, 1.0, scores.shape).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("logits", scores)]))
        return responses
'''


@pytest.fixture(scope="module")
def images(photo):
    return [(name, photo(name)) for name in PHOTOS]


def drift(session: Session):
    rule = tolerances_for(session.spec.preprocess, drift=True)
    return lambda stage: rule[Stage.OUTPUT if stage == "classifier" else Stage(stage)]


def test_cpu_profile_answers_the_same_alone_batched_and_concurrent(server, images, repository):
    session = Session(repository)
    url = server.url("grpc")
    result = check_repeatability(lambda: TritonClient(url, "grpc"), repository_probes("dali", session.recipe()),
                                 images, drift(session), repeats=2, batch_sizes=(2, 4), concurrency=6)
    stages = {(s.probe, s.stage) for s in result.spreads}
    assert ("classify_dali", "output") in stages and ("classifier", "classifier") in stages
    assert {s for p, s in stages if p == "preprocess_dali_taps"} == {"decode", "resize", "crop", "input"}
    assert all(s.top1_changes == 0 for s in result.spreads)
    # Measured: bit-identical, whatever the batch or its company (ONNX Runtime on the CPU).
    assert result.verdict.value == "equal", [s for s in result.spreads if s.max_abs]
    batched = [s for s in result.spreads if s.probe == "classifier"]
    assert all(s.answers == 1 + 2 * (1 + 2) + 2 * max(1, 6 // len(images)) for s in batched)


@pytest.fixture(scope="module")
def noisy_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("noisy") / "repository"
    (repo / "noisy" / "1").mkdir(parents=True)
    (repo / "noisy" / "config.pbtxt").write_text(NOISY_CONFIG)
    (repo / "noisy" / "1" / "model.py").write_text(NOISY_MODEL)
    with TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port()) as triton:
        yield triton


def test_planted_noise_is_caught(noisy_server, images, repository):
    session = Session(repository)
    recipe = session.recipe()
    probe = Probe("noisy", "input", {"classifier": "logits"}, scores=("classifier",),
                  prepare=lambda data: recipe(data)["input"])
    url = noisy_server.url("grpc")
    result = check_repeatability(lambda: TritonClient(url, "grpc"), [probe], images,
                                 lambda stage: DRIFT_TOLERANCES[Stage.OUTPUT], repeats=2, batch_sizes=(2,), concurrency=4)
    assert result.verdict.value == "diverged"
    assert all(s.max_abs > DRIFT_TOLERANCES[Stage.OUTPUT].atol for s in result.spreads)
    assert sum(s.top1_changes for s in result.spreads) > 0
