"""What every job sets up before it runs, in one place, for the commands, loadtest and the
benchmarks alike:

- :class:`Session`: the model repository, the spec, the reference recipe and model, the
  tolerances, and the server to talk to (``url``, or an embedded one);
- :func:`embedded_server`: the cpu profile served on free loopback ports for a block;
- :func:`connect`: a ready client to a URL or to an embedded server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from harness.client import TritonClient
from harness.errors import UsageError
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY

if TYPE_CHECKING:
    from harness.deployment import Deployment
    from harness.reference import Recipe
    from harness.reference.model import ReferenceModel
    from harness.results import ServerInfo
    from harness.server import TritonServer
    from harness.spec import Spec
    from harness.stage import Stage
    from harness.task import Task
    from harness.tolerance import Tolerance


DEFAULT_TIMEOUT = 120.0
"""Seconds a request may take (``--timeout``)."""
PROBABILITY_ATOL = 0.02
"""Output tolerance when the deployment answers probabilities: one-level input noise moves
EfficientNet-Lite0's top-1 probability by about 0.01 (its logits by 0.1-0.25)."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def embedded_server(repository: Path, spec: Path | None = None,
                    log: Callable[[str], None] = _stderr) -> Iterator["TritonServer"]:
    """Build the cpu profile of ``repository`` (with ``spec``, default the repository's own)
    in a temporary directory under ``build/`` and serve it on free loopback ports; ``log``
    gets one line when starting and one when ready (default: stderr)."""
    from harness.repository import build_cpu_profile
    from harness.server import TritonServer, free_port

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embedded-", dir=BUILD_DIR) as tmp:
        repo = build_cpu_profile(repository, Path(tmp) / "repository", spec)
        server = TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
        log("starting the embedded Triton server (cpu profile)")
        server.start()
        try:
            log(f"embedded Triton server ready: HTTP {server.http_url}, gRPC {server.grpc_url}")
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def connect(url: str | None, protocol: str, timeout: float, repository: Path, spec: Path | None = None,
            log: Callable[[str], None] = _stderr) -> Iterator[TritonClient]:
    """A ready client to ``url``, or (``url`` None) to an embedded server of ``repository``
    started for the block. Raises :class:`UsageError` if the server is not ready."""
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(embedded_server(repository, spec, log)).url(protocol)
        client = stack.enter_context(TritonClient(url, protocol, timeout=timeout))
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({protocol}) is not reachable or not ready")
        yield client


@dataclass(frozen=True)
class Session:
    """One job's set-up: which repository and spec, which server. Everything else is derived
    here, once, the same way for every command.

    ``spec_file`` None: the repository's own ``preprocessing.toml``. ``url`` None: an
    embedded server of the repository (cpu profile) is started by :meth:`connect`."""

    repository: Path = DEFAULT_REPOSITORY
    spec_file: Path | None = None
    url: str | None = None
    protocol: str = "grpc"
    timeout: float = DEFAULT_TIMEOUT
    """Seconds per request."""
    labels: Path | None = None
    """The class names of the user's model, one per line (None: the repository classifier's)."""

    @property
    def spec_path(self) -> Path:
        from harness.spec import SPEC_FILENAME

        return self.spec_file or self.repository / SPEC_FILENAME

    @functools.cached_property
    def spec(self) -> "Spec":
        from harness.spec import load_spec

        return load_spec(self.spec_path)

    @property
    def onnx_path(self) -> Path:
        from harness.model import ONNX_FILENAME

        return self.repository / "classifier" / ONNX_FILENAME

    def model_path(self, task: str = "classification") -> Path:
        """The ONNX of this repository's model serving ``task`` (the classifier, the embedder)."""
        from harness.client import REPOSITORY_TASKS
        from harness.model import ONNX_FILENAME

        return self.repository / REPOSITORY_TASKS[task].model / ONNX_FILENAME

    def classes(self) -> list[str]:
        """The classifier's class names, in output order."""
        from harness.model import LABELS_FILENAME, read_labels

        return read_labels(self.labels or self.repository / "classifier" / LABELS_FILENAME)

    def recipe(self, reference: str | None = None) -> "Recipe":
        """The training recipe: ``reference`` (built-in name or ``file.py:name``), default the spec's."""
        from harness.reference import load_recipe

        return load_recipe(self.spec, reference)

    def reference_model(self, choice: str = "auto", threads: int | None = None,
                        task: str = "classification") -> "ReferenceModel":
        """The model of ``task`` as training ran it (``auto``: PyTorch for the default model,
        else the ONNX): the classifier, or for embeddings the embedder."""
        from harness.reference.model import load_reference_model

        return load_reference_model(self.model_path(task), choice, threads)

    def deployment(self, client: TritonClient, pipeline: str = "dali", model: str | None = None,
                   probe: bytes | None = None, output: str | None = None,
                   stages: "dict[str, str] | None" = None, task: str | None = None) -> "Deployment":
        """The deployed side a job reads: this repository's ``pipeline`` (its taps model), or
        ``model``, any model or ensemble on the server, discovered from it with ``probe``
        (an encoded image) to match its tensors to stages; ``output`` and ``stages`` override
        what discovery finds (:func:`harness.deployment.target.open_deployment` picks the probe
        and logs what was found); ``task`` (``--task``; None: classification for a pipeline,
        what discovery finds for a model). Raises :class:`~harness.deployment.DeploymentError`
        for a model the harness cannot use."""
        from harness.deployment import TapsDeployment, discover
        from harness.task import get_task

        if model is None:
            return TapsDeployment(pipeline, self.spec.preprocess, get_task(task))
        if probe is None:
            raise UsageError(f"--model {model}: discovering a deployment needs an image to probe it with")
        return discover(client, model, probe, self.spec.reference.preprocess.crop.size, output, stages, task)

    def tolerances(self, scores_kind: str = "logits", task: "Task | None" = None) -> dict["Stage", "Tolerance"]:
        """The spec's tolerances; for a deployment answering ``probabilities`` (compared with
        the reference's softmax) the output's default is in probability units; a ``task``
        with its own rule for the raw output (an embedding's features) has it, unless the
        spec writes ``[tolerances.output]``."""
        from harness.compare.tolerance import tolerances_for
        from harness.stage import Stage

        tolerances = tolerances_for(self.spec.preprocess, self.spec.tolerances)
        rule = task.output_tolerance(scores_kind) if task is not None else None
        if rule is not None and Stage.OUTPUT not in self.spec.tolerances:
            tolerances[Stage.OUTPUT] = rule
            return tolerances
        if scores_kind == "probabilities" and Stage.OUTPUT not in self.spec.tolerances:
            # The output rule's form (the share allowed beyond it, its mean bound) in probability units.
            scaled = {"atol": PROBABILITY_ATOL, "mean_atol": PROBABILITY_ATOL if tolerances[Stage.OUTPUT].mean_atol else None}
            tolerances[Stage.OUTPUT] = dataclasses.replace(tolerances[Stage.OUTPUT], **scaled)
        return tolerances

    def tie_margin(self, given: float | None = None, scores_kind: str = "logits", task: "Task | None" = None) -> float:
        """The tie margin of a job, resolved here only (check, diagnose and accuracy pass it on):
        ``given`` (``--tie-margin``), or by default the output tolerance of ``scores_kind``
        (:meth:`tolerances`, :func:`harness.compare.ties.default_tie_margin`): a margin in the
        units of the scores compared; a ``task``'s own default (an embedding's: in cosine
        similarity). Raises :class:`UsageError` if negative."""
        from harness.compare.ties import default_tie_margin

        if given is None and task is not None:
            margin = task.default_margin(self.tolerances(scores_kind, task), scores_kind)
        else:
            margin = default_tie_margin(self.tolerances(scores_kind)) if given is None else given
        if margin < 0:
            raise UsageError(f"--tie-margin must be at least 0, got {margin}")
        return margin

    @contextlib.contextmanager
    def connect(self, log: Callable[[str], None] = _stderr) -> Iterator[TritonClient]:
        """A ready client to ``url``, or to an embedded server started for the block."""
        with connect(self.url, self.protocol, self.timeout, self.repository, self.spec_file, log) as client:
            yield client

    def client_factory(self, client: TritonClient) -> Callable[[], TritonClient]:
        """Makes more clients to ``client``'s server (one per worker thread), with this timeout."""
        url, protocol, timeout = client.url, client.protocol, self.timeout
        return lambda: TritonClient(url, protocol, timeout=timeout)

    def server_label(self, client: TritonClient) -> str:
        """The server's URL as reports show it: ``embedded server (URL)`` when it was started here."""
        return client.url if self.url else f"embedded server ({client.url})"

    def server_info(self, client: TritonClient) -> "ServerInfo":
        """The server a job's report names (:meth:`server_label`, the protocol): built here
        only, for every job."""
        from harness.results import ServerInfo

        return ServerInfo(self.server_label(client), client.protocol)
