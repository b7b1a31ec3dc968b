"""The deployed side: which server model a job reads, how, and what it exposes.

- :mod:`~harness.deployment.discovery`: a model's config read from the server;
- :mod:`~harness.deployment.base`: :class:`Deployment`, the object every job is given, and
  :class:`ImageRequest`, how an encoded file is sent;
- :mod:`~harness.deployment.taps`: this repository's ensembles with their taps models;
- :mod:`~harness.deployment.stepwise`: any ensemble replayed step by step, or a single model;
- :mod:`~harness.deployment.mapping`: which stage a deployed tensor is;
- :mod:`~harness.deployment.side`: requests, retries and re-sends, one policy for every job.

The names below are imported on first use: ``discovery`` and ``base`` need only numpy, so
the Locust image (tritonclient and numpy, no OpenCV or DALI) can use them.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Deployment": "base", "ImageRequest": "base", "DeploymentError": "discovery", "ModelInfo": "discovery",
    "read_model": "discovery", "DeployedSide": "side", "ModelDeployment": "stepwise", "StepwiseDeployment": "stepwise",
    "discover": "stepwise", "TapsDeployment": "taps",
}
__all__ = [*_EXPORTS, "pipeline_side"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"harness.deployment.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pipeline_side(client, pipeline: str, task, preprocess=None):
    """This repository's ``pipeline`` of ``task`` read through one ``client`` (a single-threaded job)."""
    from harness.deployment.side import DeployedSide  # here: loads Pillow, simplejpeg only when called
    from harness.deployment.taps import TapsDeployment  # here: loads Pillow, OpenCV, simplejpeg

    return DeployedSide(TapsDeployment(pipeline, task, preprocess), lambda: client)
