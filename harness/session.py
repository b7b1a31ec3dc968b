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
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from harness.client import PROTOCOLS, TritonClient
from harness.compare.ties import default_tie_margin
from harness.compare.tolerance import tolerances_for
from harness.deployment import TapsDeployment, discover
from harness.engine_input import version_file
from harness.errors import UsageError
from harness.model import LABELS_FILENAME, ONNX_FILENAME, read_labels
from harness.paths import BUILD_DIR, DEFAULT_REPOSITORY, no_repository
from harness.results import ServerInfo
from harness.scores import score_kind
from harness.server import TritonServer, free_port
from harness.spec import load_spec
from harness.stage import Stage
from harness.task import TASKS, get_task, named_deployment, repository_models
from harness.validation import require_number, require_timeout

if TYPE_CHECKING:
    from harness.client import TaskModels
    from harness.deployment import Deployment
    from harness.reference import Recipe
    from harness.reference.model import ReferenceModel
    from harness.results import ServerInfo
    from harness.scores import ScoreKind
    from harness.server import TritonServer
    from harness.spec import Spec
    from harness.stage import Stage
    from harness.task import Task
    from harness.tolerance import Tolerance


DEFAULT_TIMEOUT = 120.0
"""Seconds a request may take (``--timeout``)."""



def check_url(url: str) -> str:
    """``url`` if it is ``host:port`` (a name, an IPv4 address or a bracketed IPv6 one, and
    a port 1-65535), else :class:`UsageError` saying what is expected."""
    import re

    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UsageError(f"--url takes host:port, not a URL: drop {scheme + '://'!r} (the protocol is --protocol)")
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})", url)
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise UsageError(f"--url must be host:port (e.g. 127.0.0.1:8001), got {url!r}")
    return url


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def embedded_server(repository: Path, spec=None, log: Callable[[str], None] = _stderr,
                    models: Sequence[str] | None = None) -> Iterator["TritonServer"]:
    """Build the cpu profile of ``repository`` (with ``spec``, default the repository's own; a
    dict of spec file name -> path for others than ``preprocessing.toml``)
    in a temporary directory under ``build/`` and serve ``models`` of it (None: every model)
    on free loopback ports; ``log`` gets one line when starting and one when ready (default: stderr)."""
    from harness.repository import build_cpu_profile, with_called_models  # here: loads protobuf, tomli_w, tritonclient

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embedded-", dir=BUILD_DIR) as tmp:
        repo = build_cpu_profile(repository, Path(tmp) / "repository", spec)
        server = TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                              models=with_called_models(repo, models) if models is not None else None)
        log("starting the embedded Triton server (cpu profile)")
        server.start()
        try:
            log(f"embedded Triton server ready: HTTP {server.http_url}, gRPC {server.grpc_url}")
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def connect(url: str | None, protocol: str, timeout: float, repository: Path, spec=None,
            log: Callable[[str], None] = _stderr, models: Sequence[str] | None = None) -> Iterator[TritonClient]:
    """A ready client to ``url``, or (``url`` None) to an embedded server of ``repository``
    serving ``models`` (None: all), started for the block. Raises :class:`UsageError` if the
    server is not ready."""
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(embedded_server(repository, spec, log, models)).url(protocol)
        client = stack.enter_context(TritonClient(url, protocol, timeout=timeout))
        if not client.is_ready():
            raise UsageError(f"Triton server at {url} ({protocol}) is not reachable or not ready{_other_protocol(url, protocol)}")
        if not client.server_metadata().get("version"):  # e.g. the metrics port, which answers any GET
            raise UsageError(f"{url} ({protocol}) answers, but not as a Triton server (no server metadata): "
                             "is it the metrics port? --url takes the gRPC (default) or HTTP port")
        yield client


def _other_protocol(url: str, protocol: str) -> str:
    """``; it answers HTTP there: add --protocol http`` when ``url`` speaks the other protocol (a
    common slip: Triton's HTTP port 8000 with the default gRPC), else nothing."""
    other = next(p for p in PROTOCOLS if p != protocol)
    try:
        with TritonClient(url, other, timeout=5.0) as probe:
            answers = probe.is_ready()
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    return f"; it answers {other.upper() if other == 'http' else 'gRPC'} there: add --protocol {other}" if answers else ""


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
    task: str | None = None
    """``--task``: which of the repository's specs is the default one (detection's
    ``detection.toml``, else ``preprocessing.toml``), and which one ``spec_file`` replaces in
    an embedded server."""
    deployment_name: str | None = None
    """``--deployment``: the deployment of the repository its user named (``harness deploy --name``):
    its models and its spec are read instead of the task's own (None: this repository's own)."""

    def __post_init__(self):
        """Refuses (:class:`UsageError`, before any work) a ``url`` that is not ``host:port``,
        an unknown protocol, a timeout that is not a finite number of seconds above 0."""
        if self.url is not None:
            check_url(self.url)
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        require_timeout(self.timeout)

    def task_models(self, task: str | None = None) -> "TaskModels":
        """The repository's models serving ``task`` (None: the default task's): the named deployment's
        (:attr:`deployment_name`), else the task's own (:func:`harness.task.repository_models`)."""
        if self.deployment_name is not None:
            return named_deployment(self.repository, self.deployment_name).repository
        return repository_models(task)

    @property
    def spec_name(self) -> str:
        """The repository's spec file of this session's task (:attr:`harness.task.Task.repository`)."""
        if self.deployment_name is not None:
            return self.task_models().spec
        models = get_task(self.task).repository
        return models.spec if models is not None else "preprocessing.toml"

    @property
    def spec_path(self) -> Path:
        return self.spec_file or self.repository / self.spec_name

    @functools.cached_property
    def spec(self) -> "Spec":
        if self.spec_file is None and not Path(self.repository).is_dir():
            raise UsageError(no_repository(self.repository))
        return load_spec(self.spec_path)

    @property
    def onnx_path(self) -> Path:
        return self.model_path()

    def model_path(self, task: str | None = None) -> Path:
        """The ONNX of this repository's model serving ``task`` (None: the default task's; the
        classifier, the embedder); of a named deployment, its latest version's, which its ensemble calls."""
        if self.deployment_name is not None:
            latest = max(named_deployment(self.repository, self.deployment_name).versions)
            return version_file(self.repository / self.task_models(task).model, latest, ONNX_FILENAME)
        return self.repository / self.task_models(task).model / ONNX_FILENAME

    def classes(self) -> list[str]:
        """The classifier's class names, in output order."""
        return read_labels(self.labels or self.repository / self.task_models(None).model / LABELS_FILENAME)

    def recipe(self, reference: str | None = None) -> "Recipe":
        """The training recipe: ``reference`` (built-in name or ``file.py:name``), default the spec's."""
        from harness.reference import load_recipe  # here: loads OpenCV only when called

        return load_recipe(self.spec, reference)

    def reference_model(self, choice: str = "auto", threads: int | None = None,
                        task: str | None = None) -> "ReferenceModel":
        """The model of ``task`` as training ran it (``auto``: PyTorch for the default model,
        else the ONNX): the classifier, or for embeddings the embedder."""
        from harness.reference.model import CHOICES, load_reference_model  # here: loads OpenCV

        # the user's own model file serves whatever task, one this repository deploys or not
        path = self.model_path(task) if choice in CHOICES else Path(choice)
        return load_reference_model(path, choice, threads)

    def deployment(self, client: TritonClient, pipeline: str = "dali", model: str | None = None,
                   probe: bytes | None = None, output: str | None = None,
                   stages: "dict[str, str] | None" = None, reference: "dict | None" = None,
                   sources: "dict[str, str] | None" = None, client_function: str | None = None,
                   task: str | None = None) -> "Deployment":
        """The deployed side a job reads: this repository's ``pipeline`` (its taps model), or
        ``model``, any model or ensemble on the server, discovered from it with ``probe``
        (an encoded image) to match its tensors to stages, against ``reference`` (the
        reference's stages of the probe: the evidence of each tensor's scale and stage);
        ``output`` and ``stages`` (set where ``sources`` says) override what discovery finds
        (:func:`harness.target.open_deployment` picks the probe and logs what was
        found). ``client_function`` (``file.py:name``): the client's own preprocessing makes
        what ``model`` is fed (:mod:`harness.deployment.client_side`). ``task`` (``--task``;
        None: classification for a pipeline, what discovery finds for a model). Raises
        :class:`~harness.deployment.DeploymentError` for a model the harness cannot use."""
        if model is None:
            return TapsDeployment(pipeline, get_task(task), self.spec.preprocess, self.task_models(task))
        if probe is None:
            raise UsageError(f"--model {model}: discovering a deployment needs an image to probe it with")
        # The model input's size: a detector's resize makes it (a letterbox's canvas; -1 where it
        # follows the image, read from the reference's probe input by discovery), not [crop].
        trained = self.spec.reference.preprocess
        size = trained.input_shape[1:] if trained.resize.for_detector else trained.crop.size
        if client_function is not None:
            from harness.deployment.client_side import discover_client

            return discover_client(client, model, client_function, probe, size, output, stages, reference, sources,
                                   task, tasks=TASKS)
        return discover(client, model, probe, size, output, stages, reference, sources, task, tasks=TASKS)

    def tolerances(self, scores: "str | ScoreKind" = "logits", task: "Task | None" = None) -> dict["Stage", "Tolerance"]:
        """The spec's tolerances; the output's default is the rule of the ``scores`` compared
        (:mod:`harness.scores`: in probability units, and by total variation, for a
        deployment answering probabilities), or a ``task``'s own rule for its raw output (an
        embedding's features). A ``[tolerances.output]`` of the spec overrides the keys it
        names, in the scores' units."""
        tolerances = tolerances_for(self.spec.preprocess, self.spec.tolerances)
        kind = score_kind(scores)
        rule = task.output_tolerance(kind) if task is not None else kind.default_tolerance()
        if rule is not None:
            written = {k: float(v) for k, v in self.spec.tolerances.get(Stage.OUTPUT, {}).items()}
            tolerances[Stage.OUTPUT] = dataclasses.replace(rule, **written)
        return tolerances

    def tie_margin(self, given: float | None = None, scores: "str | ScoreKind" = "logits",
                   task: "Task | None" = None) -> float:
        """The tie margin of a job, resolved here only (check, diagnose and accuracy pass it on):
        ``given`` (``--tie-margin``), or by default the output tolerance of ``scores``
        (:meth:`tolerances`, :func:`harness.compare.ties.default_tie_margin`): a margin in the
        units of the scores compared; a ``task``'s own default (an embedding's: in cosine
        similarity). Raises :class:`UsageError` unless a finite number >= 0."""
        if given is not None:
            return require_number("--tie-margin", given, minimum=0)
        if task is not None:
            return task.default_margin(self.tolerances(scores, task), score_kind(scores))
        return default_tie_margin(self.tolerances(scores))

    @contextlib.contextmanager
    def connect(self, log: Callable[[str], None] = _stderr,
                models: Sequence[str] | None = None) -> Iterator[TritonClient]:
        """A ready client to ``url``, or to an embedded server started for the block, serving
        ``models`` (what the job reads, :meth:`harness.target.Target.served_models`; None: every model)."""
        specs = {self.spec_name: self.spec_file} if self.spec_file else None
        if self.deployment_name is not None and models is not None:  # what the target names, of this deployment
            own, named = repository_models(self.task), self.task_models()
            models = [m for m in (own.renamed(self.deployment_name, m) for m in models) if m in named.added]
        with connect(self.url, self.protocol, self.timeout, self.repository, specs, log, models) as client:
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
        return ServerInfo(self.server_label(client), client.protocol)
