"""The executions ``harness layers`` compares: one model run so that every layer's output is seen.

An execution turns a batch of model inputs [N, 3, H, W] (float32) into ``{node name: array}``
for every layer it computes, keyed by the node names of the fp32 ONNX (the *layer graph*,
:class:`LayerGraph`), so that executions of different runtimes and precisions line up by
name. Which executions exist (:data:`EXECUTIONS`):

- ``onnx``: the ONNX in ONNX Runtime (CPU), every intermediate tensor marked as an output;
- ``onnx-noopt``: the same with ONNX Runtime's graph optimizations disabled;
- ``onnx-fp16``: the fp16 ONNX the TensorRT 11 build uses (:func:`harness.precision.export_fp16`),
  or a given one, every tensor marked;
- ``torch``: the training forward of the default model, PyTorch forward hooks on every module;
- ``trt``: a TensorRT engine (fp32, or ``trt-fp16``) built from the ONNX, every tensor marked;
  needs TensorRT and a GPU (the ``layers`` service of docker-compose.yml).

The ONNX ones use Polygraphy's ``ModifyOutputs(outputs=MARK_ALL)`` for the graph surgery of
marking every tensor (where hand-written code goes wrong: value infos, types of the fp16
graph's tensors) and run it in the project's own ONNX Runtime session
(:func:`harness.model.onnx_session`).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np

from harness.errors import HarnessError, UsageError, call_user
from harness.model import INPUT_NAME, ModelError, load_torch_model, onnx_session, read_onnx

NOT_LAYERS = frozenset({"Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat",
                        "Cast", "Range", "Size"})
"""Op types that compute shapes and constants, not activations: never compared (the model's
own float Concat/Cast would be, as their outputs are float; see :meth:`LayerGraph.from_onnx`)."""
NOT_COMPARED = NOT_LAYERS | {"Pad"}
"""... and a constant Pad before a convolution, although its output is float: it moves data (its
error is its input's, and the convolution after it shows any wrong padding, in the same module
scope), and leaving it unmarked lets ONNX Runtime fold it into that convolution: 17 of
EfficientNet-Lite0's layers, a fifth of a run's time and of its activations."""


class LayersError(HarnessError, ValueError):
    """A model, execution or layer ``harness layers`` cannot use; the message says why, in one line."""


@dataclass(frozen=True)
class LayerGraph:
    """The layers of an fp32 ONNX in topological order: ``nodes`` (node names) and
    ``tensors`` (each node's first output, what is compared), only nodes with a float output."""

    path: Path
    nodes: tuple[str, ...]
    tensors: tuple[str, ...]
    op_types: tuple[str, ...]

    @staticmethod
    def from_onnx(path: Path) -> "LayerGraph":
        """Reads ``path``; raises :class:`LayersError` when it is not an ONNX model."""
        import onnx
        from onnx import TensorProto

        model = load_onnx(path)
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as exc:  # the checker's message is one line; its type varies by version
            raise LayersError(f"{path}: ONNX shape inference fails: {str(exc).splitlines()[0]}") from None
        types = {v.name: v.type.tensor_type.elem_type
                 for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
        floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
        rows = [(node.name or node.output[0], node.output[0], node.op_type) for node in model.graph.node
                if node.op_type not in NOT_COMPARED and node.output and types.get(node.output[0]) in floats]
        if not rows:
            raise LayersError(f"{path}: no layer with a float output")
        nodes, tensors, ops = zip(*rows)
        return LayerGraph(path, nodes, tensors, ops)

    def node_of(self) -> dict[str, str]:
        """{tensor name: node name}."""
        return dict(zip(self.tensors, self.nodes))

    def check_names(self, names: list[str]) -> None:
        """Raises :class:`LayersError` naming the first of ``names`` that is no layer."""
        known = set(self.nodes)
        for name in names:
            if name not in known:
                close = [n for n in self.nodes if name.lower() in n.lower()][:3]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise LayersError(f"no layer named {name!r} in {self.path}{hint}")


def load_onnx(path: Path):
    """The ONNX model at ``path``; :class:`LayersError` in one line when it is missing or not ONNX."""
    if not Path(path).is_file():
        raise LayersError(f"model not found: {path}")
    try:
        model = read_onnx(Path(path))
    except ModelError as exc:
        raise LayersError(str(exc)) from None
    if not model.graph.node:
        raise LayersError(f"{path}: not an ONNX model (no graph nodes)")
    return model


class Execution(Protocol):
    name: str

    def __call__(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """{node name: output} of every layer this execution computes, for one batch."""


class OnnxExecution:
    """An ONNX in ONNX Runtime (CPU) with every tensor marked as an output (Polygraphy).

    ``optimize`` False disables ONNX Runtime's graph optimizations (default: ORT's own, all).
    Marking every tensor already keeps ORT from fusing away the marked tensors; ``onnx-noopt``
    turns off the rest (constant folding, layout and arithmetic rewrites)."""

    def __init__(self, name: str, path: Path, graph: LayerGraph, optimize: bool = True):
        from polygraphy import constants
        from polygraphy.backend.onnx import ModifyOutputs


        self.name = name
        marked = ModifyOutputs(load_onnx(path), outputs=constants.MARK_ALL)
        with _quiet():
            model = marked()
        self._tensor_node = graph.node_of()
        keep = set(self._tensor_node)
        # Only the layers' tensors stay outputs: shape arithmetic and the fp16 graph's own
        # Casts would only cost copies.
        del_outputs = [o for o in model.graph.output if o.name not in keep]
        for o in del_outputs:
            model.graph.output.remove(o)
        # The project's own session (threads that do not spin: the folding of the previous
        # execution's outputs needs the other core), not Polygraphy's SessionFromOnnx.
        self._session = onnx_session(model.SerializeToString(), optimize=optimize)
        self._names = [o.name for o in self._session.get_outputs() if o.name in self._tensor_node]

    def __call__(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        out = self._session.run(self._names, {INPUT_NAME: batch})
        return {self._tensor_node[t]: v for t, v in zip(self._names, out)}

    def close(self) -> None:
        self._session = None


@contextlib.contextmanager
def _quiet():
    # Polygraphy logs every marked output and every activation to stdout: the CLI prints its own.
    from polygraphy.logger import G_LOGGER

    before = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.ERROR
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        G_LOGGER.module_severity = before


class TorchExecution:
    """The training forward of the default EfficientNet-Lite0 (PyTorch, eval mode), with a
    forward hook on every module.

    A module's output is keyed by the ONNX node that computes it: the last layer node in its
    export scope (``net._blocks.8._project_conv`` -> ``/net/_blocks.8/_project_conv/Conv``; a
    module's n-th call (n >= 1) is scope ``name_n``, as the exporter names it). A BatchNorm
    with no node of its own was folded into the convolution before it: its output replaces
    that convolution's. Modules with no layer node (dropout, folded ones) are reported by
    :attr:`unmatched_modules`."""

    def __init__(self, name: str, graph: LayerGraph, net=None, prefix: str = "net"):
        try:
            import torch
        except ImportError:
            raise UsageError("execution torch needs PyTorch, which is not installed here (the layers image of "
                             "`docker compose run --rm layers` leaves it out): compare onnx with trt there, and torch "
                             "in the virtualenv") from None


        self.name = name
        self.net = net if net is not None else load_torch_model()
        scopes: dict[str, str] = {}
        for node in graph.nodes:  # later nodes of a scope win: the last one is the module's output
            parts = node.split("/")[1:-1]  # "/net/_blocks.8/_project_conv/Conv" -> net, _blocks.8, _project_conv
            for depth in range(1, len(parts) + 1):
                scopes["/" + "/".join(parts[:depth])] = node
        self._scopes = scopes
        self._prefix = prefix
        self.unmatched_modules: set[str] = set()
        self._outputs: dict[str, np.ndarray] = {}
        self._last: str | None = None
        self._calls: dict[str, int] = {}
        for module_name, module in self.net.named_modules():
            module.register_forward_hook(self._hook(module_name, isinstance(module, torch.nn.modules.batchnorm._BatchNorm)))

    def _hook(self, module_name: str, batchnorm: bool) -> Callable:
        # The exporter's scope joins a ModuleList's index to its name: "_blocks.8", not "_blocks/8".
        parts: list[str] = []
        for part in [self._prefix, *module_name.split(".")]:
            if part.isdigit() and parts:
                parts[-1] += "." + part
            elif part:
                parts.append(part)
        path = "/" + "/".join(parts)

        def hook(module, inputs, output):
            if not hasattr(output, "detach"):
                return
            calls = self._calls.get(path, 0)
            self._calls[path] = calls + 1
            node = self._scopes.get(path if calls == 0 else f"{path}_{calls}")
            value = output.detach().float().numpy()
            if node is not None:
                self._outputs[node] = value
                self._last = node
            elif batchnorm and self._last is not None:  # folded into the conv before it
                self._outputs[self._last] = value
            else:
                self.unmatched_modules.add(path)
        return hook

    def __call__(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        import torch

        self._outputs, self._last, self._calls = {}, None, {}
        x = torch.from_numpy(batch)
        with torch.no_grad():
            self.net(x.half() if next(self.net.parameters()).dtype == torch.float16 else x)
        out, self._outputs = self._outputs, {}
        return out

    def close(self) -> None:
        pass


class TrtExecution:
    """A TensorRT engine built from the ONNX (fp32, or fp16 from the fp16 ONNX, strongly typed
    as TensorRT 11 builds it), every tensor marked (Polygraphy's ``ModifyNetworkOutputs``).
    Raises :class:`UsageError` where TensorRT is not installed."""

    def __init__(self, name: str, path: Path, graph: LayerGraph):
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            raise UsageError("execution trt needs TensorRT and an NVIDIA GPU: run it in the TensorRT container, "
                             "`docker compose run --rm layers IMAGES --executions onnx,trt ...`") from None
        from polygraphy import constants
        from polygraphy.backend.trt import (
            CreateConfig,
            EngineFromNetwork,
            ModifyNetworkOutputs,
            NetworkFromOnnxPath,
            Profile,
            TrtRunner,
        )

        self.name = name
        shape = (3, 224, 224)
        profile = Profile().add(INPUT_NAME, min=(1, *shape), opt=(8, *shape), max=(32, *shape))
        network = ModifyNetworkOutputs(NetworkFromOnnxPath(str(path), strongly_typed=True), outputs=constants.MARK_ALL)
        engine = EngineFromNetwork(network, config=CreateConfig(profiles=[profile]))
        self._tensor_node = graph.node_of()
        self._runner = TrtRunner(engine)
        self._runner.activate()

    def __call__(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        out = self._runner.infer({INPUT_NAME: batch})
        return {self._tensor_node[t]: np.asarray(v) for t, v in out.items() if t in self._tensor_node}

    def close(self) -> None:
        self._runner.deactivate()


def _torch_model(ref: str | None, prefix: str | None) -> tuple:
    """(module or None, scope prefix) for :class:`TorchExecution`."""
    if ref is None:
        return None, "net" if prefix is None else prefix
    from harness.reference.custom import load_object  # here: loads Pillow, OpenCV, simplejpeg

    path_text, colon, _ = ref.rpartition(":")
    if not colon or Path(path_text).suffix != ".py":
        if zipfile.is_zipfile(ref):  # torch.jit.save writes a zip archive
            raise LayersError(f"--torch-model {ref}: TorchScript takes no forward hooks; give path/file.py:factory, "
                              "or its ONNX export as --onnx")
        raise LayersError(f"--torch-model {ref}: expected path/file.py:factory (a torch.nn.Module or a function "
                          "returning one)")
    factory = load_object(ref)

    # the user's factory: its sys.exit() is a refusal with status 2, not the end of the run with its status
    net = call_user(factory) if callable(factory) and not hasattr(factory, "named_modules") else factory
    if not hasattr(net, "named_modules"):
        raise LayersError(f"--torch-model {ref}: gives a {type(net).__name__}, not a torch.nn.Module")
    net.eval()
    return net, prefix or ""


EXECUTIONS = ("onnx", "onnx-noopt", "onnx-fp16", "torch", "trt", "trt-fp16")


@contextlib.contextmanager
def open_executions(names: list[str], onnx_path: Path, graph: LayerGraph, fp16_path: Path | None = None,
                    torch_model: str | None = None, torch_prefix: str | None = None) -> Iterator[list[Execution]]:
    """The executions ``names`` of ``onnx_path`` (see the module doc), closed after the block.
    ``fp16_path`` is the fp16 ONNX (default: converted from ``onnx_path`` into a temporary file
    by :func:`harness.precision.export_fp16`, as ``harness model export --fp16`` does).
    ``torch_model`` is the user's module for ``torch``, ``path/file.py:factory`` (default: the
    default EfficientNet-Lite0); ``torch_prefix`` the scope its ONNX export put it under (default
    ``net`` for the default model, as ``harness model export`` wraps it, else none)."""
    unknown = [n for n in names if n not in EXECUTIONS]
    if unknown:
        raise UsageError(f"unknown execution {unknown[0]!r}; executions: {', '.join(EXECUTIONS)}")
    if len(names) < 2 or len(set(names)) != len(names):
        raise UsageError(f"--executions needs two or more different executions, got {','.join(names)}")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="layers-")))

        def fp16() -> Path:
            nonlocal fp16_path
            if fp16_path is None:
                from harness.precision import export_fp16

                fp16_path = export_fp16(onnx_path, tmp / "model_fp16.onnx")
            return fp16_path

        executions: list = []
        for name in names:
            if name == "onnx":
                execution = OnnxExecution(name, onnx_path, graph)
            elif name == "onnx-noopt":
                execution = OnnxExecution(name, onnx_path, graph, optimize=False)
            elif name == "onnx-fp16":
                execution = OnnxExecution(name, fp16(), graph)
            elif name == "torch":
                execution = TorchExecution(name, graph, *_torch_model(torch_model, torch_prefix))
            else:
                execution = TrtExecution(name, fp16() if name == "trt-fp16" else onnx_path, graph)
            stack.callback(execution.close)
            executions.append(execution)
        yield executions
