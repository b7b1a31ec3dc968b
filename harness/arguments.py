"""The command line's one vocabulary: argument groups shared by every command, each adding its
options to a parser and parsing them into a typed value, after Polygraphy's ``tools/args``.

- :class:`ServerArgs` -> :class:`Server`: ``--url`` (host:port of Triton's endpoint for
  ``--protocol``), ``--protocol``, ``--timeout``, and where a command reads them
  ``--metrics-url`` and the other endpoints' ports;
- :class:`RepositoryArgs` -> :class:`RepositoryPaths`: ``--repository``, ``--spec``;
- :class:`DeploymentArgs` -> :class:`~harness.target.Target` (or
  :class:`Deployments` where a command takes several): ``--pipeline``, ``--model``,
  ``--stage``, ``--client``, ``--output``, ``--postprocess``, ``--task``;
- :class:`ReferenceArgs` -> :class:`Reference`: ``--reference``, ``--reference-model``,
  ``--class-names``;
- :class:`VerdictArgs` -> :class:`FailRule`: ``--fail-on`` (one set of choices everywhere),
  ``--tie-margin``, ``--allow-rejected``;
- :class:`OutputArgs` -> :class:`Output`: ``--report`` and ``--format``.

One option name means one thing in every command (``tests/cli/test_vocabulary.py`` holds
every command to it). A renamed option keeps its old spelling for one release as a
:class:`DeprecatedAlias`: hidden from the help, it does what the new one does after one line
on stderr. Every option can also be set in the environment, ``HARNESS_<OPTION>``
(:func:`environment_name`); the command line wins (:class:`ArgumentParser`).

This module imports only the standard library when loaded: ``python3 -m harness.preflight``
uses it in the Triton image.
"""

from __future__ import annotations

import argparse
import copy
import os
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from harness.deployment.mapping import parse_overrides
from harness.errors import UsageError
from harness.paths import DEFAULT_REPOSITORY
from harness.report.formats import add_format_arg
from harness.target import Target
from harness.task import TASKS, task_name
from harness.validation import LARGEST, PORT, TIMEOUT, Number, require_timeout, user_path
from harness.verdict import FAIL_ON

if TYPE_CHECKING:
    from harness.report.formats import JobReports
    from harness.session import Session
    from harness.target import Target

ENVIRONMENT_PREFIX = "HARNESS_"
FAIL_ON_HELP = ("exit 1 when a verdict is this or worse: diverged; tie (a top-1 change within the tie margin "
                "too); close (any difference beyond equal) (default: %(default)s)")
YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
NAMES = {"http": "HTTP", "grpc": "gRPC"}


# --- the parser: help, environment, deprecated spellings ---

def environment_name(action: argparse.Action) -> str | None:
    """``HARNESS_<OPTION>`` of an option (``--class-names``: ``HARNESS_CLASS_NAMES``), from its
    first long spelling; None for a positional argument, ``--help`` and a deprecated alias."""
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)) or \
            getattr(action, "deprecated", False):
        return None
    long = [o for o in action.option_strings if o.startswith("--")]
    return ENVIRONMENT_PREFIX + long[0][2:].upper().replace("-", "_") if long else None


class _FromEnvironment(list):
    """An option's default while its environment variable is pending: still this very object
    after parsing, the command line did not give the option and the variable applies. A list,
    so that an ``append`` option given on the command line copies it as it copies a default."""

    def __init__(self, name: str, value: str, action: argparse.Action, default: Any):
        super().__init__()
        self.name, self.value, self.action, self.default = name, value, action, default


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions and epilogs line by line (each line wrapped on its own, an indented one
    with a hanging indent: exit statuses and examples keep their layout); a default that is a
    list is shown as its words (``1 5 10``), never as a Python list."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 30, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            stripped = line.lstrip()
            lead = indent + line[:len(line) - len(stripped)]
            hanging = lead + ("   " if stripped != line else "")  # under the text after "0  "
            lines.append(textwrap.fill(stripped, width, initial_indent=lead, subsequent_indent=hanging,
                                       break_on_hyphens=False, break_long_words=False)
                         if stripped else "")
        return "\n".join(lines)

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.default, (list, tuple)):
            action = copy.copy(action)
            action.default = " ".join(map(str, action.default))
        return super()._expand_help(action)


class ArgumentParser(argparse.ArgumentParser):
    """:mod:`argparse`'s parser with :class:`HelpFormatter`, options read from the environment
    (``HARNESS_<OPTION>``, the command line winning) and ``prog`` known to the deprecation
    warnings. Subcommands' parsers are of the same class."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("type", Path, user_path)  # every type=Path option, of every group, checked once

    def parse_known_args(self, args=None, namespace=None):
        pending: list[_FromEnvironment] = []
        saved = []
        for action in self._actions:
            name = environment_name(action)
            if name is None or name not in os.environ:
                continue
            sentinel = _FromEnvironment(name, os.environ[name], action, action.default)
            saved.append((action, action.default, action.required))
            action.default, action.required = sentinel, False
            pending.append(sentinel)
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        finally:
            for action, default, required in saved:
                action.default, action.required = default, required
        for sentinel in pending:
            value = getattr(namespace, sentinel.action.dest, None)
            if value is sentinel:  # not on the command line: the variable applies
                setattr(namespace, sentinel.action.dest, sentinel.default)
                self._apply_environment(namespace, sentinel)
            elif isinstance(value, _FromEnvironment):  # an append option given on the command line
                setattr(namespace, sentinel.action.dest, list(value))
        missing = [a.option_strings[0] for a in self._actions
                   if getattr(a, "needed", False) and getattr(namespace, a.dest, None) is None]
        if missing:  # required, but also given by an old spelling: argparse cannot tell
            self.error(f"the following arguments are required: {', '.join(missing)}")
        return namespace, extras

    def _apply_environment(self, namespace, sentinel: _FromEnvironment) -> None:
        action, name, value = sentinel.action, sentinel.name, sentinel.value
        if action.nargs == 0:  # a flag
            if value.strip().lower() in YES:
                action(self, namespace, [], name)
            elif value.strip().lower() not in NO:
                self.error(f"{name}={value!r}: a flag takes {', '.join(YES)} or {', '.join(n for n in NO if n)}")
            return
        several = action.nargs in ("+", "*") or isinstance(action.nargs, int)
        each = isinstance(action, (argparse._AppendAction, argparse._ExtendAction)) and not several
        try:
            tokens = shlex.split(value) if several or each else [value]
        except ValueError as exc:
            self.error(f"{name}={value!r}: {exc}")
        try:
            for group in ([t] for t in tokens) if each else [tokens]:
                action(self, namespace, self._get_values(action, group), name)
        except argparse.ArgumentError as exc:
            self.error(f"{name}={value!r}: {exc.message}")


def warn(prog: str, message: str) -> None:
    """One line on stderr: ``warning: PROG: MESSAGE``."""
    print(f"warning: {prog}: {message}", file=sys.stderr, flush=True)


class DeprecatedAlias(argparse.Action):
    """A renamed option's old spelling, kept for one release: hidden from the help, it warns
    on stderr and does what ``target`` (the new option's action) does with its values
    (``each``: one call per value, for a list given to an option now repeated)."""

    deprecated = True

    def __init__(self, option_strings, dest, target: argparse.Action, use: str, each: bool = False, **kwargs):
        super().__init__(option_strings, target.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.target, self.use, self.each = target, use, each

    def __call__(self, parser, namespace, values, option_string=None):
        warn(parser.prog, f"{option_string} is deprecated and goes in the next release: use {self.use}")
        for value in (values if self.each else [values]):
            self.target(parser, namespace, value, self.target.option_strings[0])


def alias(group, old: str, target: argparse.Action, use: str | None = None, **kwargs) -> argparse.Action:
    """Add ``old`` as the deprecated spelling of ``target`` (:class:`DeprecatedAlias`);
    ``kwargs`` (``type``, ``nargs``, ``choices``, ...) as the old option took them."""
    kwargs.setdefault("type", target.type)
    kwargs.setdefault("choices", target.choices)
    if target.required:  # argparse would not count the alias: the parser checks it (ArgumentParser)
        target.required, target.needed = False, True
    if target.nargs == 0:
        kwargs.setdefault("nargs", 0)
    return group.add_argument(old, action=DeprecatedAlias, target=target, use=use or target.option_strings[0],
                              metavar=target.metavar, **kwargs)


def epilog(ok: str, found: str | None, error: str, extra: str = "") -> str:
    """A command's epilog: its exit statuses (the one policy of :mod:`harness.errors`, in the
    command's words; ``found`` None: the command finds nothing, it never exits 1), then how
    options come from the environment."""
    statuses = [f"  0  {ok}"] + ([f"  1  {found}"] if found else []) + [f"  2  {error}"]
    return "exit status:\n" + "\n".join(statuses) + "\n" + (f"\n{extra}\n" if extra else "") + "\n" + ENVIRONMENT_HELP


ENVIRONMENT_HELP = (f"Every option can also be set in the environment as {ENVIRONMENT_PREFIX}<OPTION> (--url: HARNESS_URL, "
                    "--class-names: HARNESS_CLASS_NAMES, a flag such as --resume: HARNESS_RESUME=1; several values "
                    "separated by spaces); the command line wins.")


# --- the groups ---

class ArgGroup:
    """One concern's options: :meth:`add` puts them in a titled group of a parser,
    :meth:`parse` reads them back as one typed value."""

    title = ""

    def add(self, parser: argparse.ArgumentParser):
        group = parser.add_argument_group(self.title)
        self.add_arguments(group)
        return self

    def add_arguments(self, group) -> None:
        raise NotImplementedError

    def parse(self, args: argparse.Namespace):
        raise NotImplementedError


@dataclass(frozen=True)
class Server:
    """Where requests go: ``url`` (``host:port`` of Triton's ``protocol`` endpoint; None: an
    embedded server started for the command), with ``timeout`` seconds per request."""

    url: str | None = None
    protocol: str = "grpc"
    timeout: float = 120.0
    metrics_url: str | None = None
    """Triton's metrics endpoint (None: port 8002 of ``url``'s host)."""
    ports: Mapping[str, int] = field(default_factory=dict)
    """The ports of the server's other endpoints on ``url``'s host (``http``, ``grpc``), where given."""
    addresses: Mapping[str, str] = field(default_factory=dict)
    """An endpoint's full address given with a deprecated option (``--grpc-url``), by protocol."""


class ServerArgs(ArgGroup):
    """``--url``, ``--protocol``, ``--timeout``; with ``metrics`` also ``--metrics-url``, with
    ``ports`` the other endpoints' ports (a load test uses both protocols). ``legacy_protocol``:
    what a ``--url`` given without ``--protocol`` meant in this command before the vocabulary
    was one (loadtest: HTTP), read so for one more release with a warning."""

    title = "server"

    def __init__(self, timeout: float | None = None, metrics: bool = False, ports: bool = False,
                 legacy_protocol: str | None = None):
        self.timeout, self.metrics, self.ports, self.legacy_protocol = timeout, metrics, ports, legacy_protocol

    def add_arguments(self, group) -> None:
        from harness.client import PROTOCOLS  # here: loads Pillow, simplejpeg only when called

        if self.timeout is None:
            from harness.session import DEFAULT_TIMEOUT

            self.timeout = DEFAULT_TIMEOUT
        group.add_argument("--url", default=None, metavar="HOST:PORT",
                           help="Triton's endpoint for --protocol; without it an embedded server (cpu profile) is "
                                "started on free loopback ports and stopped afterwards")
        legacy = (f"; for this release a --url given without --protocol is still read as the "
                  f"{NAMES[self.legacy_protocol]} endpoint, with a warning") if self.legacy_protocol else ""
        # None where a --url without it still has its old meaning: stated or not must be told apart
        group.add_argument("--protocol", choices=PROTOCOLS, default=None if self.legacy_protocol else "grpc",
                           help=f"the protocol of --url (default: grpc{legacy})")
        group.add_argument("--timeout", type=TIMEOUT, default=self.timeout, metavar="SECONDS",
                           help="seconds per request (default: %(default)s)")
        if self.ports:
            group.add_argument("--http-port", type=PORT, default=None, metavar="PORT",
                               help="the port of Triton's HTTP endpoint on --url's host, when --url is the gRPC one "
                                    "(default: 8000)")
            group.add_argument("--grpc-port", type=PORT, default=None, metavar="PORT",
                               help="the port of Triton's gRPC endpoint on --url's host, when --url is the HTTP one "
                                    "(default: 8001)")
            group.add_argument("--grpc-url", dest="grpc_address", default=None, help=argparse.SUPPRESS,
                               action=_DeprecatedStore, use="--grpc-port PORT (on --url's host)")
        if self.metrics:
            group.add_argument("--metrics-url", default=None, metavar="URL",
                               help="Triton's metrics endpoint (default: port 8002 of --url's host)")

    def parse(self, args: argparse.Namespace) -> Server:
        protocol, url = args.protocol, args.url
        if protocol is None and url is not None and self.legacy_protocol:
            protocol = self.legacy_protocol
            scheme, sep, rest = url.partition("://")
            if sep and scheme in ("http", "grpc"):
                protocol, url = scheme, rest.rstrip("/")
                warn(_prog(args), f"--url {scheme}://HOST:PORT is deprecated and goes in the next release: give "
                                  f"--url HOST:PORT --protocol {scheme}")
            else:
                warn(_prog(args), f"--url without --protocol is read as the {NAMES[protocol]} endpoint for this release "
                                  f"only; from the next it is the gRPC endpoint, as in every command: add --protocol "
                                  f"{protocol}")
        ports = {p: getattr(args, f"{p}_port", None) for p in ("http", "grpc")}
        grpc_address = getattr(args, "grpc_address", None)
        return Server(url, protocol or "grpc", require_timeout(args.timeout), getattr(args, "metrics_url", None),
                      {p: port for p, port in ports.items() if port is not None},
                      {"grpc": grpc_address} if grpc_address else {})


class _DeprecatedStore(argparse._StoreAction):
    """A deprecated option with no new spelling of the same shape (``--grpc-url HOST:PORT``:
    ``--grpc-port PORT``): stored as before, with a warning."""

    deprecated = True

    def __init__(self, *args, use: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.use = use

    def __call__(self, parser, namespace, values, option_string=None):
        warn(parser.prog, f"{option_string} is deprecated and goes in the next release: use {self.use}")
        super().__call__(parser, namespace, values, option_string)


def _prog(args: argparse.Namespace) -> str:
    return getattr(args, "prog", None) or "harness"


@dataclass(frozen=True)
class RepositoryPaths:
    repository: Path
    spec: Path | None = None
    """None: the repository's own spec."""
    deployment: str | None = None
    """A deployment of the repository its user named (``harness deploy --name``); None: the repository's own models."""


class RepositoryArgs(ArgGroup):
    """``--repository``, ``--deployment`` and (``spec``) ``--spec``."""

    title = "model repository"

    def __init__(self, spec: bool = True, named: bool = False):
        self.spec = spec
        self.named = named
        """``--deployment``: the jobs that read one deployment of the repository take it."""

    def add_arguments(self, group) -> None:
        group.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, metavar="DIR",
                           help="the production model repository (default: %(default)s)")
        if self.named:
            group.add_argument("--deployment", default=None, metavar="NAME",
                               help="the deployment of the repository named NAME by harness deploy --name: its models "
                                    "and its spec (default: the repository's own models)")
        if self.spec:
            from harness.spec import SPEC_FILENAME

            group.add_argument("--spec", type=Path, default=None, metavar="FILE",
                               help=f"preprocessing spec (default: the repository's {SPEC_FILENAME})")

    def parse(self, args: argparse.Namespace) -> RepositoryPaths:
        return RepositoryPaths(args.repository, getattr(args, "spec", None), getattr(args, "deployment", None))


def add_class_names(group, alias_labels: bool, required: bool = False, help: str | None = None) -> None:
    """``--class-names FILE`` (``--labels``, where it meant the class names, as its deprecated
    spelling)."""
    action = group.add_argument(
        "--class-names", type=Path, default=None, metavar="FILE", required=required,
        help=help or "class names of your model, one per line in output order (default: the repository's)")
    if alias_labels:
        alias(group, "--labels", action)


@dataclass(frozen=True)
class Reference:
    """The training side: ``recipe`` (a built-in or ``file.py:name``; None: the spec's),
    ``model`` (``auto``, ``torch``, ``onnx`` or a path) and the model's ``class_names`` file."""

    recipe: str | None = None
    model: str = "auto"
    class_names: Path | None = None


class ReferenceArgs(ArgGroup):
    """``--reference``, ``--reference-model``, ``--class-names`` (``alias_labels``: with
    ``--labels`` as its deprecated spelling, in commands where ``--labels`` meant it)."""

    title = "reference (training side)"

    def __init__(self, alias_labels: bool = True):
        self.alias_labels = alias_labels

    def add_arguments(self, group) -> None:
        group.add_argument("--reference", default=None, metavar="NAME|FILE.py:NAME|SOURCE",
                           help="opencv, torchvision, or your own Compose/callable (one taking a PIL image gets one), or "
                                "your framework's definition: torchvision:WEIGHTS, timm:PATH|MODEL, "
                                "hf:PATH[:pil|:torchvision] (read into the spec's operations and proven on the photos; "
                                "docs/deploy.md) (default: the spec's [reference] recipe)")
        group.add_argument("--reference-model", default="auto", metavar="auto|torch|onnx|PATH",
                           help="the trained model: your own as an ONNX file (ONNX Runtime) or a TorchScript file "
                                "(PyTorch), needed with --model; or how to run the repository's classifier: auto "
                                "(PyTorch for the default EfficientNet-Lite0, else its ONNX), torch, onnx "
                                "(default: %(default)s)")
        add_class_names(group, self.alias_labels)

    def parse(self, args: argparse.Namespace) -> Reference:
        return Reference(args.reference, args.reference_model, args.class_names)


class PipelineChoices(tuple):
    """The pipelines ``--pipeline`` offers (shown in the help and the errors); ``both``, infer's
    old value for every pipeline, is still taken for one release (:class:`_Pipelines`)."""

    def __contains__(self, value) -> bool:
        return tuple.__contains__(self, value) or value == "both"


class _Pipelines(argparse._AppendAction):
    """``--pipeline`` repeated; ``both`` (deprecated) appends every pipeline, with a warning."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values != "both":
            return super().__call__(parser, namespace, values, option_string)
        warn(parser.prog, f"--pipeline both is deprecated and goes in the next release: use "
                          f"{' '.join(f'--pipeline {p}' for p in self.choices)}")
        for pipeline in self.choices:
            super().__call__(parser, namespace, pipeline, option_string)


@dataclass(frozen=True)
class Deployments:
    """What a command taking several deployed sides reads: ``pipelines`` of this repository
    (None: not named) and one :class:`~harness.target.Target` per ``--model``."""

    pipelines: tuple[str, ...] | None
    targets: tuple["Target", ...]
    task: str | None = None
    output: str | None = None
    client: str | None = None
    postprocess: str | None = None

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(t.model for t in self.targets)


class DeploymentArgs(ArgGroup):
    """Which deployed side a command reads: this repository's ``--pipeline`` or ``--model``,
    with ``options`` of ``--stage``, ``--client``, ``--output``, ``--postprocess``, ``--task``;
    ``several``: ``--pipeline`` and ``--model`` repeatable (parsed into :class:`Deployments`);
    ``notes``: what this command adds to an option's help."""

    title = "deployment"
    OPTIONS = ("pipeline", "model", "stage", "client", "output", "postprocess", "task")

    def __init__(self, options: Sequence[str] = OPTIONS, several: bool = False, notes: Mapping[str, str] = {}):
        self.options, self.several, self.notes = tuple(options), several, dict(notes)

    def _help(self, name: str, text: str) -> str:
        note = self.notes.get(name, "")
        return text + (f" {note}" if note.startswith("(") else f"; {note}" if note else "")

    def add_arguments(self, group) -> None:
        from harness.client import PIPELINES  # here: loads Pillow, simplejpeg only when called

        repeat = " (repeat for several)" if self.several else ""
        if "pipeline" in self.options:
            pipelines = PipelineChoices(PIPELINES)
            text = ("this repository's ensemble classify_PIPELINE" + ("" if self.several else " with its taps model")
                    + repeat)
            if self.several:
                group.add_argument("--pipeline", action=_Pipelines, choices=pipelines, default=None,
                                   help=self._help("pipeline", text))
            else:
                group.add_argument("--pipeline", choices=tuple(PIPELINES), default="dali",
                                   help=self._help("pipeline", text + " (default: %(default)s)"))
        if "model" in self.options:
            instead = " instead of --pipeline" if "pipeline" in self.options else ""
            group.add_argument("--model", action="append" if self.several else "store", default=None, metavar="NAME",
                               help=self._help("model", f"any model or ensemble on the server{instead}{repeat}: how "
                                               "to send it images and which output holds what its task compares are "
                                               "read from its config"))
        if "stage" in self.options:
            group.add_argument("--stage", action="append", default=None, metavar="STEP=STAGE",
                               help="with --model: compare step model STEP's output (or STEP.TENSOR) as STAGE "
                                    "(decode, resize, crop, input, output, or none), overriding the mapping found; "
                                    "repeatable")
        if "client" in self.options:
            group.add_argument("--client", default=None, metavar="FILE.py:NAME",
                               help="with --model: your client's own preprocessing, a function of the file's bytes "
                                    "returning the model's input tensor (or a dict of tensors by input name), "
                                    + self.notes.get("client", "run here as your client runs it"))
        if "output" in self.options:
            group.add_argument("--output", default=None, metavar="NAME",
                               help="with --model: the output the task reads (default: for classification, the one "
                                    "FP32 [classes] output, logits preferred; for embedding, the one named like an "
                                    "embedding; for detection, the raw output beside the boxes, or the one float "
                                    "output)")
        if "postprocess" in self.options:
            group.add_argument("--postprocess", default=None, metavar="FILE.py:NAME",
                               help="--task detection: your postprocessing of the detector's raw output, a callable "
                                    "of (outputs by name, geometry) returning harness.detection.boxes.Detections; "
                                    "--task segmentation: a callable of (raw output, source (height, width)) "
                                    "returning (matte, mask) at that size; run on both sides (default: the spec's "
                                    "[postprocess] table)")
        if "task" in self.options:
            add_task(group, self.notes.get("task"))

    def parse(self, args: argparse.Namespace):
        """A :class:`~harness.target.Target`, or with ``several``, :class:`Deployments`."""
        try:
            stages = parse_overrides(getattr(args, "stage", None))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        common = dict(output=getattr(args, "output", None), stages=stages, task=getattr(args, "task", None),
                      client=getattr(args, "client", None), postprocess=getattr(args, "postprocess", None))
        if not self.several:
            return Target(getattr(args, "pipeline", None) or "dali", getattr(args, "model", None), **common)
        pipelines = getattr(args, "pipeline", None)
        models = dict.fromkeys(getattr(args, "model", None) or ())
        return Deployments(tuple(dict.fromkeys(pipelines)) if pipelines else None,
                           tuple(Target("dali", m, **common) for m in models), common["task"], common["output"],
                           common["client"], common["postprocess"])


def add_task(group, note: str | None = None, default: str | None = None) -> None:
    """``--task``: what is compared after the model input (:mod:`harness.task`)."""
    group.add_argument("--task", type=_task, default=default, metavar="{" + ",".join(TASKS) + "} or FILE.py:NAME",
                       help=note or ("what the model is for, so what is compared after its input (default: "
                                     "classification for --pipeline; --task embedding reads embed_PIPELINE, --task "
                                     "detection detect_PIPELINE with the repository's detection.toml; for --model, what "
                                     "its outputs show: a label file or logits for classification, a name like "
                                     "embedding for embedding, boxes for detection; FILE.py:NAME: your own task, "
                                     "a harness.task.Task)"))


def _task(name: str) -> str:
    """``--task``'s value: a registered task's name (the user's ``FILE.py:NAME`` loaded and
    registered now, so a bad one is refused while parsing); loads no built-in task's code."""
    try:
        return task_name(name)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--task {name}: ")) from None


@dataclass(frozen=True)
class FailRule:
    """What fails a run: a verdict at ``fail_on`` or worse; a top-1 change within
    ``tie_margin`` (None: the output tolerance) is a tie; ``allow_rejected``: an image only one
    side rejects does not fail it."""

    fail_on: str = "diverged"
    tie_margin: float | None = None
    allow_rejected: bool = False


class VerdictArgs(ArgGroup):
    """``--fail-on`` (the same choices in every command: ``note`` says what this command makes
    of one it cannot tell apart) and, with ``ties``, ``--tie-margin`` and ``--allow-rejected``."""

    title = "verdicts"

    def __init__(self, fail_on: bool = True, ties: bool = True, note: str = ""):
        self.fail_on, self.ties, self.note = fail_on, ties, note

    def add_arguments(self, group) -> None:
        if self.fail_on:
            group.add_argument("--fail-on", choices=FAIL_ON, default="diverged",
                               help=FAIL_ON_HELP + (f"; {self.note}" if self.note else ""))
        if self.ties:
            group.add_argument("--tie-margin", type=Number(0.0, LARGEST), default=None, metavar="MARGIN",
                               help="a top-1 change is a tie, not a divergence, when the reference's top-1 score was "
                                    "ahead of the deployed top-1 by at most this much, in the units of the scores "
                                    "compared: logits, or probability for a deployment answering probabilities "
                                    "(default: the output tolerance's atol, 0.5 logits or 0.05 probability unless the "
                                    "spec's [tolerances.output] sets it); for --task embedding, a nearest-neighbour "
                                    "change whose reference similarities differ by at most this (default: 0.01)")
            group.add_argument("--allow-rejected", action="store_true",
                               help="an image rejected by one side only (the server cannot serve an image training "
                                    "processes, or the reverse) does not fail the run (default: it does)")

    def parse(self, args: argparse.Namespace) -> FailRule:
        return FailRule(getattr(args, "fail_on", "diverged"), getattr(args, "tie_margin", None),
                        getattr(args, "allow_rejected", False))


@dataclass(frozen=True)
class Output:
    """Where a command's reports go (``report``) and in which formats (None: its usual files)."""

    report: Path | None
    formats: tuple[str, ...] | None = None


class OutputArgs(ArgGroup):
    """``--report`` (``default``: its default; ``required``; ``help``: this command's words for
    it; ``old``: the deprecated spellings it had here; ``metavar``: DIR, or FILE where the report
    is one file) and ``--format`` (``jobs``: what the command writes)."""

    title = "output"

    def __init__(self, default: Path | None, *jobs: "JobReports", required: bool = False, help: str | None = None,
                 old: Iterable[str] = (), metavar: str = "DIR"):
        self.default, self.jobs, self.required, self.help, self.old = default, jobs, required, help, tuple(old)
        self.metavar = metavar

    def add_arguments(self, group) -> None:
        default = "" if self.required or self.default is None else " (default: %(default)s)"
        report = group.add_argument("--report", type=Path, default=self.default, required=self.required,
                                    metavar=self.metavar, help=(self.help or "report directory") + default)
        for old in self.old:
            alias(group, old, report)
        if self.jobs:
            add_format_arg(group, *self.jobs)

    def parse(self, args: argparse.Namespace) -> Output:
        return Output(args.report, getattr(args, "formats", None))


class Groups:
    """A command's argument groups, added to its parser in the order given;
    :meth:`parse` reads each into its typed value, by the name it was given."""

    def __init__(self, parser: argparse.ArgumentParser, **groups: ArgGroup):
        self.groups = groups
        for group in groups.values():
            group.add(parser)
        parser.set_defaults(prog=parser.prog)

    def parse(self, args: argparse.Namespace) -> "Parsed":
        return Parsed({name: group.parse(args) for name, group in self.groups.items()})


class Parsed:
    """The typed values of a command's groups, as attributes (``parsed.server``)."""

    def __init__(self, values: Mapping[str, Any]):
        self.__dict__.update(values)


def make_session(repository: RepositoryPaths, server: Server | None = None, class_names: Path | None = None,
            task: str | None = None) -> "Session":
    """The :class:`~harness.session.Session` of a repository, a server and the reference's class
    names (``server`` None: an embedded server)."""
    from harness.session import Session  # here: loads Pillow, simplejpeg only when called

    server = server or Server()
    return Session(repository.repository, repository.spec, server.url, server.protocol, server.timeout, class_names,
                   task, repository.deployment)


__all__ = ["ArgGroup", "ArgumentParser", "DeploymentArgs", "Deployments", "DeprecatedAlias", "FailRule", "Groups",
           "HelpFormatter", "Output", "OutputArgs", "Parsed", "Reference", "ReferenceArgs", "RepositoryArgs",
           "RepositoryPaths", "Server", "ServerArgs", "VerdictArgs", "add_class_names", "add_task", "alias",
           "environment_name", "epilog", "make_session", "warn"]
