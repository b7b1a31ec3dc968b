"""The OCR pipelines served at the CI size (specs/detection/small.toml, specs/ocr/small.toml),
beside foreign OCR deployments answering bad texts and one misreading every second request:
one server for every module that reads them (``ocr_server`` in tests/conftest.py:
tests/ocr/test_ocr_check.py, tests/test_diagnose_agrees.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from harness.paths import PROJECT_ROOT
from harness.repository import build_cpu_profile
from harness.server import TritonServer, free_port
from tests.loadtest.planted import add_wrong_every_other

SPECS = PROJECT_ROOT / "specs"
SMALL = SPECS / "ocr" / "small.toml"
BAD_TEXTS = ("ocr_invalid_utf8", "ocr_empty_text")
"""Foreign OCR deployments (tests/ocr/bad_texts): ocr_opencv's answer, its first word's text not
UTF-8, or empty."""
WRONG_WORDS = "ocr_wrong"
"""ocr_dali's answer with every second request's first word misread (tests/loadtest/planted.py)."""
MODELS = ["ocr_dali", "ocr_opencv", "ocr_dali_taps", "ocr_opencv_taps", "detect_dali", "detect_opencv",
          "detect_preprocess_dali_taps", "ocr_preprocess_dali", "recognizer", *BAD_TEXTS, WRONG_WORDS]
"""What check and diagnose read of both pipelines (a BLS model does not load the models it calls:
named here)."""


def add_bad_texts(profile):
    """The foreign deployments answering a bad text, beside the repository's own models."""
    from harness.repository import load_config, save_config

    for name, mode in zip(BAD_TEXTS, ("invalid", "empty")):
        config = load_config(profile / "ocr_opencv" / "config.pbtxt")
        kept = [o for o in config.output if o.name in ("BOXES", "SCORES", "TEXTS", "PROBABILITY", "GEOMETRY")]
        del config.output[:]
        config.output.extend(kept)
        config.name = name
        config.ClearField("dynamic_batching")
        config.ClearField("instance_group")
        config.parameters.clear()
        config.parameters["mode"].string_value = mode
        (profile / name / "1").mkdir(parents=True)
        (profile / name / "1" / "model.py").write_text((Path(__file__).parent / "bad_texts" / "model.py").read_text())
        save_config(config, profile / name / "config.pbtxt")


@contextlib.contextmanager
def serve(repository: Path, directory: Path) -> Iterator[TritonServer]:
    """The cpu profile of ``repository`` at the CI size, with the foreign models, in ``directory``,
    served with :data:`MODELS` only."""
    profile = build_cpu_profile(repository, directory,
                                {"detection.toml": SPECS / "detection" / "small.toml", "ocr.toml": SMALL})
    add_bad_texts(profile)
    add_wrong_every_other(profile, WRONG_WORDS, "ocr_dali", "word")
    triton = TritonServer(profile, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), models=MODELS)
    with triton:
        yield triton
    assert not triton.is_running(), "tritonserver did not exit"
