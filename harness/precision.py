"""An fp16 classifier for TensorRT 11, and what it costs against fp32.

TensorRT 11 builds every network strongly typed: ``trtexec --fp16`` no longer exists, and
an fp16 engine comes from an ONNX whose tensors already are fp16. :func:`export_fp16`
writes one beside the fp32 model (``model_fp16.onnx``) with onnxconverter-common, keeping
fp32 inputs and outputs so the classifier's Triton config is unchanged.
:func:`compare_precision` measures the two on the CPU with ONNX Runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.model import INPUT_NAME, onnx_session

FP16_FILENAME = "model_fp16.onnx"


def export_fp16(onnx_path: Path, out: Path | None = None, fp32_layers: Sequence[str] = ()) -> Path:
    """Convert the classifier ONNX to fp16 internally (fp32 I/O); returns the new file
    (default ``model_fp16.onnx`` beside it). ``fp32_layers`` (node names, default none) stay
    fp32, with Casts around them: the fallback :func:`harness.layers.fallback.find_fp32_fallback`
    finds."""
    import warnings

    import onnx
    from onnxconverter_common import float16

    with warnings.catch_warnings():  # one warning per weight below fp16's smallest value, rounded to it
        warnings.simplefilter("ignore", UserWarning)
        # Softmax stays fp32: its exponentials are where fp16 loses most, and converting it
        # makes the converter mistype the fp32 `probabilities` output.
        model = float16.convert_float_to_float16(onnx.load(str(onnx_path)), keep_io_types=True,
                                                 op_block_list=["Softmax"], node_block_list=list(fp32_layers))
    _keep_fp32_outputs(model)
    onnx.checker.check_model(model)
    out = out or onnx_path.with_name(FP16_FILENAME)
    onnx.save(model, str(out))
    return out


def _keep_fp32_outputs(model) -> None:
    # keep_io_types misses an output fed by a blocked (fp32) op: the converter ends it with
    # a Cast to fp16 all the same. Make that Cast (to fp32, from fp32) and the output fp32,
    # so the Triton config's TYPE_FP32 outputs still hold.
    from onnx import TensorProto

    producers = {out: node for node in model.graph.node for out in node.output}
    for output in model.graph.output:
        if output.type.tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        cast = producers.get(output.name)
        if cast is None or cast.op_type != "Cast":
            raise ValueError(f"fp16 conversion left output {output.name!r} in fp16")
        for attr in cast.attribute:
            if attr.name == "to":
                attr.i = TensorProto.FLOAT
        output.type.tensor_type.elem_type = TensorProto.FLOAT


@dataclass(frozen=True)
class PrecisionComparison:
    """fp16 against fp32 logits on the same model inputs."""

    images: int
    top1_agreement: float
    max_abs_logit: float
    mean_abs_logit: float


def compare_precision(fp32: Path, fp16: Path, inputs: np.ndarray, batch: int = 16) -> PrecisionComparison:
    """Run both models (ONNX Runtime, CPU) on ``inputs`` [N, 3, H, W] and compare their logits."""
    def logits(path: Path) -> np.ndarray:
        session = onnx_session(path)
        return np.concatenate([session.run(["logits"], {INPUT_NAME: inputs[i:i + batch]})[0]
                               for i in range(0, len(inputs), batch)])

    a, b = logits(fp32), logits(fp16)
    err = np.abs(a.astype(np.float64) - b)
    return PrecisionComparison(len(inputs), float(np.mean(a.argmax(1) == b.argmax(1))), float(err.max()), float(err.mean()))
