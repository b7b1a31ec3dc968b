"""A Hugging Face folder's own code never runs (issue 54): a ``preprocessor_config.json`` whose
processor comes from ``auto_map`` is refused before transformers is imported, and transformers
sees only the checked config, never the folder (its ``config.json``, its ``.py`` files). Run as
a user at a terminal would answer transformers' "Do you wish to run the custom code? [y/N]": y
on stdin. No server."""

import json
import subprocess
import sys

from harness.paths import DEFAULT_REPOSITORY, PROJECT_ROOT

ONNX = DEFAULT_REPOSITORY / "classifier" / "model.onnx"
VIT = json.loads((PROJECT_ROOT / "tests" / "reference" / "definitions" / "vit" / "preprocessor_config.json").read_text())
RUN = """
import json, sys
from harness.cli import main
first = main(sys.argv[1:8])
imported = "transformers" in sys.modules
second = main(sys.argv[8:])
print(json.dumps([first, imported, second]))
"""


def evil_folder(folder, marker, **config):
    """A model folder whose evil.py writes ``marker`` when imported."""
    folder.mkdir()
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    return folder


def test_a_folders_custom_code_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    auto_map = {key: value for key, value in VIT.items() if key != "image_processor_type"}
    mapped = evil_folder(tmp_path / "mapped", marker, auto_map={"AutoImageProcessor": "evil.EvilProcessor"}, **auto_map)
    beside = evil_folder(tmp_path / "beside", marker, **auto_map)  # no processor named: transformers reads config.json
    (beside / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoImageProcessor": "evil.EvilProcessor"}}))
    deploy = [["deploy", str(ONNX), "--reference", f"hf:{folder}", "--no-check", "--out", str(tmp_path / folder.name / "out")]
              for folder in (mapped, beside)]
    run = subprocess.run([sys.executable, "-c", RUN, *deploy[0], *deploy[1]], input="y\ny\ny\n", capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert not marker.exists(), run.stderr[-3000:]
    assert run.stdout.strip(), (run.returncode, run.stderr[-3000:])
    first, imported, second = json.loads(run.stdout.splitlines()[-1])
    assert (first, imported, second) == (2, False, 2), run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert "has auto_map: its processor is the folder's own Python code" in errors[0]
    assert "transformers cannot make the processor" in errors[1]  # the config alone names no processor
    assert "Traceback" not in run.stderr and "Do you wish" not in run.stdout + run.stderr
