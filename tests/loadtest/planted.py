"""A model answering wrongly every second request, added to a test's cpu profile beside the model it
wraps (``wrong_every_other/model.py``): the load test and the watch must report its wrong masks and
words as wrong answers, where the model it wraps has none."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from harness.repository import load_config


def add_wrong_every_other(profile: Path, name: str, target: str, mode: str) -> str:
    """Write model ``name`` into the repository ``profile``: ``target``'s answer (its outputs, read
    from its config, whichever way the profile wrote it), every second request's ``mode`` (``mask``
    or ``word``) planted wrong."""
    outputs = "".join(f"output {{ {text_format.MessageToString(o, as_one_line=True)} }}\n"
                      for o in load_config(profile / target / "config.pbtxt").output)
    (profile / name / "1").mkdir(parents=True)
    (profile / name / "1" / "model.py").write_text((Path(__file__).parent / "wrong_every_other" / "model.py").read_text())
    (profile / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        f'{outputs}instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n'
        f'parameters [ {{ key: "target" value: {{ string_value: "{target}" }} }},\n'
        f'             {{ key: "mode" value: {{ string_value: "{mode}" }} }} ]\n')
    return name
