"""Serve a trained classifier: a copy of the model repository with it installed.

``harness model import`` installs an ONNX and its labels into ``classifier/``; a model with
another class count than the repository's also needs the output ``dims`` of the classifier
and of both ensembles changed. :func:`install_classifier` does both in a copy, so the
checked-in repository is never touched; :func:`serve_trained` serves that copy's cpu profile.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from harness.model import LABELS_FILENAME, ONNX_FILENAME, import_onnx, read_labels
from harness.repository import build_cpu_profile, profile_written, set_class_count, with_called_models
from harness.spec import SPEC_FILENAME, load_spec

"""Outputs of the classifier and of the ensembles whose one dimension is the class count."""


def install_classifier(source: Path, model_dir: Path, out: Path, spec_path: Path | None = None) -> Path:
    """Copy the repository ``source`` (gpu profile, spec resolved) to ``out`` with the
    ``model.onnx`` and ``labels.txt`` of ``model_dir`` as its classifier, imported as
    ``harness model import`` does, and every class-count dimension set to the label count."""
    with profile_written(source, out, "gpu", spec_path, writer="harness train") as folder:  # replaces out only when whole
        crop = load_spec(folder / SPEC_FILENAME).preprocess.crop.size
        import_onnx(model_dir / ONNX_FILENAME, model_dir / LABELS_FILENAME, folder / "classifier", tuple(crop))
        set_class_count(folder, len(read_labels(folder / "classifier" / LABELS_FILENAME)))
    return out


@contextlib.contextmanager
def serve_trained(source: Path, model_dir: Path, work: Path) -> Iterator["TritonServer"]:  # noqa: F821
    """The embedded server (cpu profile, free loopback ports) serving the trained model of
    ``model_dir`` through both ensembles, and only them (the other tasks' models are not
    loaded: a third of the start and of the memory); ``work`` receives the repositories."""
    from harness.server import TritonServer, free_port
    from harness.task import get_task

    gpu = install_classifier(source, model_dir, work / "repository")
    cpu = build_cpu_profile(gpu, work / "repository-cpu")
    with TritonServer(cpu, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      models=with_called_models(cpu, get_task(None).repository.served())) as server:
        yield server
