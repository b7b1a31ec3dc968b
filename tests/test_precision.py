"""The fp16 classifier TensorRT 11 builds from (no trtexec --fp16 there): fp16 inside, the
fp32 contract outside, and its error against fp32 measured on real photos."""

import numpy as np
import onnx

from harness.model import ONNX_FILENAME, check_onnx, onnx_signature
from harness.precision import compare_precision, export_fp16
from harness.preprocessing import opencv

PHOTOS = ["squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg", "rocket.jpg"]


def test_fp16_model_keeps_the_classifier_contract_and_its_predictions(repository, spec, photo, tmp_path):
    fp32 = repository / "classifier" / ONNX_FILENAME
    fp16 = export_fp16(fp32, tmp_path / "model_fp16.onnx")
    check_onnx(fp16, spec.preprocess.crop.size)
    assert onnx_signature(fp16) == onnx_signature(fp32)  # fp32 in and out: the Triton config holds
    weights = {t.data_type for t in onnx.load(str(fp16)).graph.initializer}
    assert onnx.TensorProto.FLOAT16 in weights  # and fp16 inside
    inputs = np.stack([opencv.run(photo(n), spec.preprocess, ["input"])["input"] for n in PHOTOS])
    result = compare_precision(fp32, fp16, inputs)
    assert result.images == len(PHOTOS) and result.top1_agreement == 1.0
    assert 0 < result.max_abs_logit < 0.5  # it does differ, by less than the output tolerance
