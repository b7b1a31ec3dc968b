"""What a task's models need beyond their folders in the repository, declared by the task.

A task lists its models in :class:`harness.client.TaskModels` (``added``, ``engines``); those that
need more than their checked-in folder are each a :class:`ShippedModel` there (``shipped``): how
``harness model export`` writes their files, how a profile checks the files against the model's
contract, and how the cpu profile serves a model that needs a GPU in production
(:class:`CpuReplacement`). The repository code (:mod:`harness.repository`, ``harness model
export``) reads them from the registered tasks, so a new task's models need no line there.
Standard library only: the task API's bottom.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = ["CpuReplacement", "ShippedModel"]


@dataclass(frozen=True)
class CpuReplacement:
    """How the cpu profile serves a model that needs a GPU in production.

    Only serving parameters may differ from production (instances, threads, queue delay);
    names, tensors, batch limits and ensemble steps are the production model's."""

    entry_module: str
    """The Python-backend model (``harness.serving.*``) whose ``TritonPythonModel`` serves it."""
    parameters: Mapping[str, str] = field(default_factory=dict)
    instances: int = 1
    max_queue_delay_us: int | None = 0
    """The dynamic batcher's wait for a fuller batch; ``None`` keeps production's. On CPU a
    bigger batch is not cheaper per image (ONNX Runtime on one thread: 7.9 ms an image at
    batch 1, 2, 4 and 8), so waiting only adds latency; requests that queue up while an
    instance is busy are still batched together."""


# One thread per instance and as many instances as cores (2 here): the Python backend runs one
# request at a time per instance, so instances give the parallelism, and single-threaded ones
# spend the least CPU per image (decoding: DALI's per-sample threads cannot split one image;
# ONNX Runtime: 7.9 ms an image on one thread, 9.5 on two). A pipeline's preprocess_dali and
# preprocess_opencv both have two, so the DALI vs OpenCV load tests compare like with like.
DALI_ON_CPU = CpuReplacement("harness.serving.preprocess_dali_cpu", {"num_threads": "1"}, instances=2)
"""A DALI preprocessing model: the same graph with the CPU decoder."""
DALI_TAPS_ON_CPU = CpuReplacement("harness.serving.preprocess_dali_cpu", {"num_threads": "1"})
"""A DALI model returning the stage taps (the harness's, not the load's): one instance."""
ONNX_ON_CPU = CpuReplacement("harness.serving.classifier_onnx", {"intra_op_threads": "1"}, instances=2)
"""A TensorRT engine: its ONNX in ONNX Runtime."""


@dataclass(frozen=True)
class ShippedModel:
    """One model of a task whose folder needs more than its checked-in files."""

    name: str
    """The model, its folder in the repository."""
    cpu: CpuReplacement | None = None
    """How the cpu profile serves it (None: as production does)."""
    export: Callable[[Path, Any, Any], Path] | None = None
    """``harness model export``: writes its files into its folder: ``export(folder, spec, config)``
    (the repository's ``preprocessing.toml`` spec, the model's ``ModelConfig``) -> the file written."""
    exported: str = ""
    """What ``harness model export`` says it did, ``{path}`` the file written."""
    check: Callable[[Path, Any, Any], None] | None = None
    """A profile's check of its files: ``check(folder, spec, config)`` raises a
    :class:`harness.errors.HarnessError` naming how they break the model's contract."""
