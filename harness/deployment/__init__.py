"""The deployed side: which server model a job reads, how, and what it exposes.

- :mod:`~harness.deployment.discovery`: a model's config read from the server;
- :mod:`~harness.deployment.base`: :class:`Deployment`, the object every job is given;
- :mod:`~harness.deployment.taps`: this repository's ensembles with their taps models;
- :mod:`~harness.deployment.stepwise`: any ensemble replayed step by step, or a single model;
- :mod:`~harness.deployment.mapping`: which stage a deployed tensor is;
- :mod:`~harness.deployment.side`: requests, retries and re-sends, one policy for every job.
"""

from harness.deployment.base import Deployment, ImageRequest
from harness.deployment.discovery import DeploymentError, ModelInfo, read_model
from harness.deployment.side import DeployedSide
from harness.deployment.stepwise import ModelDeployment, StepwiseDeployment, discover
from harness.deployment.taps import TapsDeployment


def pipeline_side(client, pipeline: str, preprocess=None) -> DeployedSide:
    """This repository's ``pipeline`` read through one ``client`` (a single-threaded job)."""
    return DeployedSide(TapsDeployment(pipeline, preprocess), lambda: client)


__all__ = ["pipeline_side", "DeployedSide", "Deployment", "DeploymentError", "ImageRequest", "ModelDeployment", "ModelInfo",
           "StepwiseDeployment", "TapsDeployment", "discover", "read_model"]
