"""A user's classifier that is not the project's: 37 classes with their names, a 256-pixel crop, an NHWC
input `pixel_values` and one output `scores`, as another exporter writes it. It is the project's
EfficientNet-Lite0 (fully convolutional up to its global pooling, so it takes 256x256 as it takes 224x224)
with a new head: 37 rows of its own ImageNet classification layer, so its predictions are real ones."""

import warnings
from pathlib import Path

import onnx
from onnx import TensorProto, helper, numpy_helper

from harness.model import read_labels, write_labels
from harness.paths import DEFAULT_REPOSITORY

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
LABELS = DEFAULT_REPOSITORY / "classifier" / "labels.txt"
CLASSES = tuple(range(0, 37 * 27, 27))
"""The ImageNet classes of the head: 37 of them."""
SIZE = 256


def thirty_seven_classes(folder: Path, ir_version: int | None = None, opset: int | None = None,
                         fp16: bool = False) -> tuple[Path, Path]:
    """(the ONNX, its class names) written into ``folder``; ``ir_version``/``opset`` stamped as a newer
    exporter writes them (the graph itself is unchanged); ``fp16``: float16 throughout, its input and
    scores too (onnxconverter-common's conversion)."""
    model = onnx.load(str(ONNX))
    graph = model.graph
    head = next(node for node in graph.node if node.op_type == "Gemm")
    for initializer in graph.initializer:
        if initializer.name in head.input[1:]:
            initializer.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(initializer)[list(CLASSES)],
                                                         initializer.name))
    graph.node.remove(next(node for node in graph.node if node.op_type == "Softmax"))  # scores only
    original = graph.input[0]
    graph.input.remove(original)
    graph.input.insert(0, helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["N", SIZE, SIZE, 3]))
    graph.node.insert(0, helper.make_node("Transpose", ["pixel_values"], [original.name], perm=[0, 3, 1, 2]))
    del graph.output[:]
    graph.node.append(helper.make_node("Identity", [head.output[0]], ["scores"]))
    graph.output.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", len(CLASSES)]))
    if fp16:
        from onnxconverter_common.float16 import convert_float_to_float16

        with warnings.catch_warnings():  # it warns for each weight below float16's range that it rounds
            warnings.simplefilter("ignore", UserWarning)
            model = convert_float_to_float16(model, keep_io_types=False)
    if opset is not None:
        model.opset_import[0].version = opset
    if ir_version is not None:
        model.ir_version = ir_version
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    names = read_labels(LABELS)
    write_labels(folder / "classes.txt", [names[k] for k in CLASSES])
    return folder / "model.onnx", folder / "classes.txt"


def another_version(folder: Path) -> Path:
    """The project's classifier as its next version: the same graph, the same 1000 classes, its head's rows rolled
    by one (each class scored by its neighbour's row), so that its answers differ from the first version's on every
    photo. Written into ``folder`` as ``model.onnx``."""
    model = onnx.load(str(ONNX))
    head = next(node for node in model.graph.node if node.op_type == "Gemm")
    for initializer in model.graph.initializer:
        if initializer.name in head.input[1:]:
            rolled = numpy_helper.to_array(initializer)
            initializer.CopyFrom(numpy_helper.from_array(rolled[list(range(1, len(rolled))) + [0]], initializer.name))
    del model.metadata_props[:]  # no longer `harness model export`'s EfficientNet-Lite0, whose tag says PyTorch is its twin
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"
