"""A foreign segmentation deployment for the tests: its own model names and tensor names, and a
two-class argmax head made from U²-Net-p's map.

- ``cutout_net``: the segmenter's ONNX (the repository's export) with a head appended by the
  ``onnx`` library: the map p (clipped to [1e-6, 1 - 1e-6]) to logits [2, 320, 320] =
  [0, log(p / (1 - p))] (argmax: p > 0.5), input ``pixels``, output ``class_logits``; served
  by ONNX Runtime, and the reference model of the check (``--reference-model``).
- ``cutout`` and its planted twins (:mod:`tests.segmentation.foreign.model`): a Python-backend
  model taking the photo's bytes (``photo``), preprocessing as rembg does, calling
  ``cutout_net``: ``cutout_bgr`` feeds BGR, ``cutout_nan`` answers NaN logits,
  ``cutout_small_mask`` answers an ``alpha`` and a ``mask`` at 320x320, not the source size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "foreign"
NET = "cutout_net"
MODES = {"cutout": "aligned", "cutout_bgr": "bgr", "cutout_nan": "nan", "cutout_small_mask": "small_mask"}
MODELS = [NET, *MODES]
POSTPROCESS = HERE / "postprocess.py"
SPEC = HERE / "cutout.toml"
LOGITS = '{ name: "class_logits" data_type: TYPE_FP32 dims: [ 2, -1, -1 ] }'
SMALL_MASK = ('{ name: "alpha" data_type: TYPE_FP32 dims: [ -1, -1 ] },\n'
              '  { name: "mask" data_type: TYPE_UINT8 dims: [ -1, -1 ] }')


def two_class_onnx(segmenter: Path, out: Path) -> Path:
    """The segmenter's ONNX with the argmax head appended, its input renamed ``pixels``."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(segmenter))
    graph = model.graph
    old_input, fused = graph.input[0].name, graph.output[0].name
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old_input:
                node.input[i] = "pixels"
    graph.input[0].name = "pixels"
    graph.initializer.extend([helper.make_tensor("head_lo", TensorProto.FLOAT, [], [1e-6]),
                              helper.make_tensor("head_hi", TensorProto.FLOAT, [], [1 - 1e-6]),
                              helper.make_tensor("head_one", TensorProto.FLOAT, [], [1.0]),
                              helper.make_tensor("head_zero", TensorProto.FLOAT, [], [0.0])])
    graph.node.extend([
        helper.make_node("Clip", [fused, "head_lo", "head_hi"], ["head_p"]),
        helper.make_node("Sub", ["head_one", "head_p"], ["head_q"]),
        helper.make_node("Div", ["head_p", "head_q"], ["head_odds"]),
        helper.make_node("Log", ["head_odds"], ["head_logit"]),
        helper.make_node("Mul", ["head_logit", "head_zero"], ["head_background"]),
        helper.make_node("Concat", ["head_background", "head_logit"], ["class_logits"], axis=1)])
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("class_logits", TensorProto.FLOAT, ["batch", 2, 320, 320]))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def add_foreign(profile: Path, segmenter: Path) -> Path:
    """The foreign models into the repository ``profile``; the two-class ONNX's path (the reference model)."""
    net = profile / NET
    (net / "1").mkdir(parents=True)
    onnx_path = two_class_onnx(segmenter, net / "model.onnx")
    (net / "1" / "model.py").write_text("from harness.serving.classifier_onnx import TritonPythonModel  # noqa: F401\n")
    (net / "config.pbtxt").write_text(
        f'name: "{NET}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 3, 320, 320 ] } ]\n'
        'output [ { name: "class_logits" data_type: TYPE_FP32 dims: [ 2, 320, 320 ] } ]\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
        'parameters [ { key: "intra_op_threads" value: { string_value: "2" } } ]\n')
    for name, mode in MODES.items():
        (profile / name / "1").mkdir(parents=True)
        (profile / name / "1" / "model.py").write_text((HERE / "model.py").read_text())
        outputs = SMALL_MASK if mode == "small_mask" else LOGITS
        (profile / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "photo" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
            f'output [\n  {outputs}\n]\ninstance_group [ {{ count: 1 kind: KIND_CPU }} ]\n'
            f'parameters [ {{ key: "mode" value: {{ string_value: "{mode}" }} }} ]\n')
    return onnx_path


def head_logits(p: np.ndarray) -> np.ndarray:
    """The head in numpy: what ``cutout_net`` appends to the map."""
    p = np.clip(p.astype(np.float32), 1e-6, 1 - 1e-6)
    logit = np.log(p / (1 - p))
    return np.concatenate([logit * 0, logit], axis=-3)
