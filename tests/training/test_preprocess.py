"""The training loader's preprocessors: the GPU runner (``mixed`` decoder) is the CPU runner's
construction with another decoder, and its pipeline is the production graph. Serialized
here without a GPU; run where one exists."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.compare.metrics import quick_verdict
from harness.compare.tolerance import tolerances_for
from harness.preprocessing.dali_graph import CpuPipelineRunner, pipeline_arguments, production_pipelines
from harness.spec import SpecError, with_overrides
from harness.training.preprocess import DeployedPreprocessor, GpuPipelineRunner, gpu_pipeline
from harness.verdict import Verdict

GPU = torch.cuda.is_available()


def test_the_gpu_runners_pipeline_is_the_production_graph(spec, repository):
    pipe = gpu_pipeline(spec.preprocess, 4, device_id=None)
    serialized = pipe.serialize()  # an argument this DALI lacks would raise here
    assert b"mixed" in serialized
    production = production_pipelines(repository)["preprocess_dali"]
    production.serialize()
    assert pipeline_arguments(pipe) == pipeline_arguments(production)


def test_fancy_upsampling_off_is_refused_on_the_cpu_decoder_and_defined_on_the_gpu_one(spec):
    plain = with_overrides(spec.preprocess, decode={"fancy_upsampling": False})
    with pytest.raises(SpecError, match="only on the GPU"):
        CpuPipelineRunner(plain, 1)
    assert b"mixed" in gpu_pipeline(plain, 2, device_id=None).serialize()


@pytest.mark.skipif(GPU, reason="a GPU is present: the runner is built and run below instead")
def test_without_a_gpu_the_runner_fails_when_built_with_dalis_own_reason(spec):
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        GpuPipelineRunner(spec.preprocess, 2)


@pytest.mark.skipif(not GPU, reason="needs a GPU (nvJPEG)")
def test_on_a_gpu_the_mixed_decoder_feeds_what_the_cpu_one_does_within_the_decoder_rule(spec, photos_dir):
    photos = [photos_dir / n for n in ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "grace_hopper.jpg")]
    data = [p.read_bytes() for p in photos] + [b"not an image"]
    gpu = DeployedPreprocessor(spec.preprocess, 4, device="cuda")(data)
    cpu = DeployedPreprocessor(spec.preprocess, 4)(data)
    tolerance = tolerances_for(spec.preprocess, spec.tolerances)["input"]
    for name, g, c in zip(photos, gpu, cpu):
        assert g.device.type == "cuda" and tuple(g.shape) == c.shape, name
        assert quick_verdict(c, g.cpu().numpy(), tolerance)[0] is not Verdict.DIVERGED, name
    assert isinstance(gpu[-1], Exception) and isinstance(cpu[-1], Exception)  # a bad file fails only itself
    assert np.isfinite(np.stack([g.cpu().numpy() for g in gpu[:-1]])).all()
