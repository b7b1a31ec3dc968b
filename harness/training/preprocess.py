"""The preprocessings a training loader can feed a model with, each producing model inputs.

- ``deployed``: the DALI graph the server runs (:mod:`harness.preprocessing.dali_graph`),
  with DALI's CPU decoder on a CPU, or the ``mixed`` (nvJPEG) decoder on a GPU as in
  production: batched, so it is built here;
- every reference recipe with ``trains`` (:data:`harness.reference.BUILT_IN`, the one
  registry of libraries), through its ``model_inputs``: ``opencv``, the code the
  ``preprocess_opencv`` model serves; ``torchvision``, the common training recipe,
  ``Resize`` on PIL images (PIL's filter; sizes truncated as torchvision does) ->
  ``CenterCrop`` -> ``ToTensor`` -> ``Normalize``, with the spec's size, crop and normalization;
- ``mix:F``: each image through ``opencv`` with probability F, else ``deployed`` (the
  ``cpu_percentage`` of torchpipe's training integration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.preprocessing import ImageError
from harness.reference import BUILT_IN
from harness.spec import Preprocess

DEPLOYED, OPENCV, MIX = "deployed", "opencv", "mix"
CHOICES = (DEPLOYED, *(name for name, recipe in BUILT_IN.items() if recipe.trains))
"""Single preprocessings: the deployed graph, then the registry's; ``mix:F`` combines
``deployed`` with ``opencv``."""

@dataclass(frozen=True)
class Preprocessing:
    """A ``--preprocessing`` choice."""

    name: str
    """One of :data:`CHOICES`, or mix."""
    cpu_fraction: float = 0.0
    """For ``mix``: the share of images preprocessed by OpenCV instead of the deployed graph."""

    def __str__(self) -> str:
        return f"{MIX}:{self.cpu_fraction:g}" if self.name == MIX else self.name


def parse_preprocessing(text: str) -> Preprocessing:
    """One of :data:`CHOICES` (``deployed``, ``opencv``, ``torchvision``), or ``mix:F`` with F in [0, 1]."""
    if text in CHOICES:
        return Preprocessing(text)
    name, _, fraction = text.partition(":")
    if name == MIX:
        try:
            value = float(fraction)
        except ValueError:
            value = -1.0
        if 0.0 <= value <= 1.0:
            return Preprocessing(MIX, value)
        raise ValueError(f"mix:F needs a fraction F between 0 and 1 (the OpenCV share), got {text!r}")
    raise ValueError(f"preprocessing must be one of {', '.join(CHOICES)} or mix:F, got {text!r}")


class Preprocessor:
    """Encoded images -> model inputs, one call per chunk of images. Built inside each
    loader worker (DALI pipelines cannot be pickled or shared between processes)."""

    name = "preprocessor"

    def __call__(self, images: Sequence[bytes]) -> list:
        """Per image, in order: its CHW float32 model input (numpy on the CPU, a torch
        tensor on a GPU), or the ImageError saying why it failed (never a raise)."""
        raise NotImplementedError


class DeployedPreprocessor(Preprocessor):
    """The deployed DALI graph: CPU decoder (``device="cpu"``) or ``mixed`` on GPU ``device``."""

    name = DEPLOYED

    def __init__(self, p: Preprocess, max_batch_size: int, device: str = "cpu"):
        from harness.preprocessing.dali_graph import CpuPipelineRunner

        self.runner = CpuPipelineRunner(p, max_batch_size) if device == "cpu" else GpuPipelineRunner(
            p, max_batch_size, _device_id(device))

    def __call__(self, images):
        results = self.runner.run([np.frombuffer(data, np.uint8) for data in images])
        return [r.error if r.error is not None else r.outputs[0] for r in results]


class _PerImage(Preprocessor):
    def __init__(self, name: str, run: Callable[[bytes], np.ndarray]):
        self.name, self._run = name, run

    def __call__(self, images):
        results = []
        for data in images:
            try:
                results.append(self._run(data))
            except ImageError as exc:
                results.append(exc)
        return results


@dataclass(frozen=True)
class PreprocessorFactory:
    """Everything needed to build the preprocessors in a worker process (picklable)."""

    preprocess: Preprocess
    choice: Preprocessing
    max_batch_size: int
    device: str = "cpu"

    def build(self) -> dict[str, Preprocessor]:
        """Preprocessor name -> preprocessor: one entry, or two for ``mix``."""
        built = {}
        for name in [DEPLOYED, OPENCV] if self.choice.name == MIX else [self.choice.name]:
            if name == DEPLOYED:
                built[name] = DeployedPreprocessor(self.preprocess, self.max_batch_size, self.device)
            else:
                built[name] = _PerImage(name, BUILT_IN[name].model_inputs(self.preprocess))
        return built

    def route(self, count: int, seed: int | tuple[int, ...]) -> list[str]:
        """Which preprocessor handles each of ``count`` images (``mix``: OpenCV with
        probability ``cpu_fraction``, drawn with ``seed``)."""
        if self.choice.name != MIX:
            return [self.choice.name] * count
        draws = np.random.default_rng(seed).random(count)
        return [OPENCV if u < self.choice.cpu_fraction else DEPLOYED for u in draws]


def _device_id(device: str) -> int:
    """``cuda`` or ``cuda:N`` -> N (default 0)."""
    name, _, index = device.partition(":")
    if name != "cuda":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return int(index or 0)


GPU_THREADS = 2
"""CPU threads of the GPU runner's pipeline (the mixed decoder's host-side work)."""


def _gpu_runner_class():
    from harness.preprocessing.dali_graph import INPUT_NAME, CpuPipelineRunner

    class _GpuPipelineRunner(CpuPipelineRunner):
        """The production graph (``mixed`` decoder) on one GPU, built by the CPU runner's own
        construction (:meth:`CpuPipelineRunner.define`) and sharing its per-image error
        handling; outputs stay on that GPU as torch tensors, copied by DALI's PyTorch plugin.
        Its pipeline is serialized in the tests on a CPU; running it needs a GPU."""

        decoder = "mixed"

        def __init__(self, p: Preprocess, max_batch_size: int, device_id: int = 0, num_threads: int = GPU_THREADS):
            super().__init__(p, max_batch_size, num_threads=num_threads, device_id=device_id)
            require_dalis_nvjpeg()  # once built (without a GPU DALI's own error comes first), before a decode

        def _run_batch(self, images):
            import torch
            from nvidia.dali.plugin.pytorch import feed_ndarray

            self._pipe.feed_input(INPUT_NAME, [np.ascontiguousarray(x, dtype=np.uint8).reshape(-1) for x in images])
            (out,) = self._pipe.run()
            dense = out.as_tensor()  # every model input has the crop's shape
            tensor = torch.empty(dense.shape(), dtype=torch.float32, device=f"cuda:{self.device_id}")
            feed_ndarray(dense, tensor, cuda_stream=torch.cuda.current_stream(self.device_id))
            return [(tensor[i],) for i in range(len(images))]

    return _GpuPipelineRunner


def require_dalis_nvjpeg() -> None:
    """Refuse to decode on the GPU with another nvJPEG than the server's: the one DALI runs in
    this process is torchvision's when torchvision was imported before DALI loaded its own
    (:func:`harness.manifest.load_dalis_nvjpeg`)."""
    from harness.manifest import load_dalis_nvjpeg, load_manifest, loaded_decode_stack, same_version

    load_dalis_nvjpeg()
    found, pinned = loaded_decode_stack()["nvJPEG"], load_manifest().nvjpeg.version
    if found is not None and not same_version(found, pinned):
        raise HarnessError(f"DALI in this process runs nvJPEG {found}, not the {pinned} the server's DALI runs: "
                           "torchvision (whose wheel bundles its own nvJPEG) was imported before DALI loaded its "
                           "own; call harness.manifest.load_dalis_nvjpeg() before importing torchvision")


def GpuPipelineRunner(p: Preprocess, max_batch_size: int, device_id: int = 0):  # noqa: N802 - a class factory
    """The deployed graph with the ``mixed`` decoder on GPU ``device_id`` (needs a GPU)."""
    return _gpu_runner_class()(p, max_batch_size, device_id)


def gpu_pipeline(p: Preprocess, max_batch_size: int, device_id: int | None = 0):
    """The GPU runner's pipeline, defined but not built (``device_id=None``: serializable
    on a machine without a GPU)."""
    return _gpu_runner_class().define(p, max_batch_size, num_threads=GPU_THREADS, device_id=device_id)
