"""Advice in spec terms: which side each change belongs on, and the corrected reference spec.

:func:`recommend` says, for one cause, what to set on the side that can change: the
deployment when its library can take training's values, else training.
:func:`corrected_spec` writes the spec whose ``[reference]`` describes training as the
deployment behaves (every cause applied), so that ``harness check --spec`` it finds no
divergence: it ``extends`` the spec diagnosed and changes only ``[reference]``, so the
deployed sections (and an embedded server built from them) stay as they were.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from harness import operations
from harness.diagnose.catalogue import Hypothesis, plain, resolve_auto, result_key
from harness.operations import resize_mode
from harness.spec import Preprocess, Spec, SpecError, load_spec, to_table, with_overrides

if TYPE_CHECKING:
    from harness.diagnose.evaluation import Diagnoser


def _fp16_layer(diagnoser: Diagnoser) -> str:
    """``" (in fp16 the model first diverges at layer ...)"``: harness layers on the diagnosed
    images, the default model in fp32 against fp16 (what the hypothesis runs); empty when the
    default model's export is not there to name the layers."""
    from harness.errors import HarnessError
    from harness.layers.fp16 import fp16_layers
    from harness.model import ONNX_FILENAME
    from harness.paths import DEFAULT_REPOSITORY
    from harness.reference import BUILT_IN

    onnx_path = DEFAULT_REPOSITORY / "classifier" / ONNX_FILENAME
    try:
        found = fp16_layers(onnx_path, diagnoser.deployed.data, BUILT_IN[diagnoser.recipe](diagnoser.reference))
    except (HarnessError, OSError):
        return ""
    return f" ({found.sentence()})"


def recommend(h: Hypothesis, diagnoser: Diagnoser, deployed_spec_path: str | None, deployed_library: str) -> str:
    """The change to make, in spec terms, on the side that should change: the deployment
    when it can take training's values, else training. ``deployed_spec_path`` None: a
    deployment discovered on the server (not built from a spec), ``deployed_library`` its
    model: the change is said in the spec's terms for both sides."""
    if deployed_spec_path is None and not h.fp16:
        changes = h.changes(diagnoser.reference)
        library = f" (computing like {h.recipe})" if h.recipe and changes else ""
        library += " (its image stages in BGR too: the decoder's order kept)" if h.bgr_images else ""
        behaves = f"the deployment `{deployed_library}` behaves as if {_assign(changes, 2)}{library}" if changes else (
            f"the deployment `{deployed_library}` computes like {h.recipe}")
        fix = f"make its preprocessing do {_assign(changes, 1)} as training did, or " if changes else ""
        return (f"Training did {_assign(changes, 1) or diagnoser.recipe}; {behaves}: {fix}train with "
                f"{_assign(changes, 2) or h.recipe} (`--write-spec` writes that reference).")
    if h.fp16:
        return ("The deployed classifier answers like the model in fp16" + _fp16_layer(diagnoser)
                + ": build the TensorRT engine in fp32 "
                "(FP16=0 for the engine builder), or validate the model in fp16 before serving it so: "
                "`harness layers IMAGES --executions onnx,onnx-fp16` names its first divergent layer, and "
                "`harness model export --fp16 --calibration IMAGES` keeps the layers that break fp16 in fp32.")
    parts = []
    if h.recipe:
        parts.append(f"The deployment computes like {h.recipe}, not like training's {diagnoser.recipe}, with the same "
                     f"settings: preprocess the training data with {h.recipe} ([reference] recipe = \"{h.recipe}\"), "
                     f"since the deployed {deployed_library} cannot change its arithmetic.")
    changes = h.changes(diagnoser.reference)
    post = [c for c in changes if _section(c[0]) not in PREPROCESS_SECTIONS]
    changes = [c for c in changes if _section(c[0]) in PREPROCESS_SECTIONS]
    for table in dict.fromkeys(_section(c[0]) for c in post):
        # the result step: the deployed spec's [postprocess] (or [recognition]), which its step reads
        group = [c for c in post if _section(c[0]) == table]
        parts.append(f"Set {_assign(group, 1)} in the deployed spec's [{table}] ({deployed_spec_path}, read by the "
                     f"{RESULT_STEPS.get(table, table + ' step')}) to match training (the deployment behaves as if "
                     f"{_assign(group, 2)}); or train with {_assign(group, 2)}.")
    if not changes:
        return " ".join(parts)
    deployed = diagnoser.deployed_spec
    where = f"in the deployed spec ({deployed_spec_path}, read by the {deployed_library} pipeline)"
    if all(plain(_get(deployed, key)) == trained for key, trained, _ in changes):
        return " ".join(parts + [
            f"The deployed spec already says {_assign(changes, 1)}, yet the server behaves as if {_assign(changes, 2)}: "
            f"it is not serving {deployed_spec_path}; rebuild and redeploy the repository."])
    # All of training's values at once (a resize mode comes with its size), else key by key.
    groups = [changes] if _deployable(deployed, changes, deployed_library) is None else [[c] for c in changes]
    for group in groups:
        reason = _deployable(deployed, group, deployed_library)
        if reason is None:
            parts.append(f"Set {_assign(group, 1)} {where} to match training (the deployment behaves as if "
                         f"{_assign(group, 2)}); or train with {_assign(group, 2)}.")
        else:
            parts.append(f"Train with {_assign(group, 2)}: the deployed {deployed_library} cannot do "
                         f"{_assign(group, 1)} ({reason}).")
    return " ".join(parts)


PREPROCESS_SECTIONS = ("decode", "resize", "crop", "normalize", "input")
"""The spec's preprocessing tables (a cause's other keys belong to the task's result step)."""
RESULT_STEPS = {"postprocess": "postprocessing step", "recognition": "recognizer's crop, input and decoding"}


def _section(key: str) -> str:
    return key.partition(".")[0]


def _get(p: Preprocess, key: str):
    section, name = key.split(".")
    return getattr(getattr(p, section), name)


def _assign(changes, which: int) -> str:
    return ", ".join(f"{c[0]} = {_toml(c[which])}" for c in changes)


def _deployable(deployed: Preprocess, changes, library: str) -> str | None:
    """None if the deployed implementation can take these values, else why not."""
    overrides: dict[str, dict] = {}
    for key, trained, _ in changes:
        section, name = key.split(".")
        overrides.setdefault(section, {})[name] = trained
    try:
        _check_deployable(with_overrides(deployed, **overrides), library)
    except SpecError as exc:
        return str(exc).removeprefix("override: ")
    return None


def _check_deployable(p: Preprocess, library: str) -> None:
    if library == "DALI":
        from harness.preprocessing.dali_graph import check_supported
    else:
        from harness.preprocessing.opencv import check_supported
    check_supported(p)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def reference_table(spec: Spec, recipe: str, preprocess: Preprocess, postprocess: Mapping[str, Any] | None = None) -> dict:
    """The ``[reference]`` table that, on top of ``spec``, gives ``recipe`` with exactly
    ``preprocess``: the recipe, and every key that differs from the spec's reference; and
    ``postprocess``, the reference's result-step keys changed: ``KEY`` in ``[postprocess]`` (a
    detector's thresholds), ``TABLE.KEY`` in that table (OCR's ``recognition.crop``)."""
    before, after = to_table(spec.reference.preprocess), to_table(preprocess)
    table: dict = {"recipe": recipe}
    for section, values in after.items():
        changed = {k: v for k, v in values.items() if v != before[section].get(k)}
        # a key to_table leaves out at its default (Key.omitted_at_default) when only one side has it
        changed.update({k: plain(getattr(type(getattr(preprocess, section))(), k))
                        for k in before[section].keys() - values.keys()})
        if changed:
            table[section] = changed
    for key, value in (postprocess or {}).items():
        section, _, name = result_key(key).partition(".")
        table.setdefault(section, {})[name] = plain(value)
    return table


def reference_toml(spec: Spec, recipe: str, preprocess: Preprocess, postprocess: Mapping[str, Any] | None = None) -> str:
    """The corrected ``[reference]`` as TOML (see :func:`reference_table`): the combined
    change in spec terms."""
    lines = ["[reference]", f'recipe = "{recipe}"']
    for section, values in reference_table(spec, recipe, preprocess, postprocess).items():
        if section != "recipe":
            lines += ["", f"[reference.{section}]", *(f"{k} = {_toml(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


def corrected_spec(spec: Spec, spec_path: Path, recipe: str, preprocess: Preprocess, causes: Sequence[Hypothesis],
                   out: Path, note: str = "", header: str | None = None,
                   postprocess: Mapping[str, Any] | None = None) -> Path:
    """Write the spec diagnosed with its ``[reference]`` corrected to ``recipe`` and
    ``preprocess`` (the reference with every cause applied), and check that it reads back
    as exactly that. ``note`` goes into the header comment; ``header`` says what the
    ``[reference]`` is (default: training as the deployment behaves)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    source, folder = Path(spec_path).resolve(), out.parent.resolve()
    # Relative when both live in one tree (the pair can move together), else absolute.
    extends = os.path.relpath(source, folder) if os.path.commonpath([source, folder]) != "/" else str(source)
    header = header or "the [reference] below is training as the deployment behaves"
    lines = [f"# Written by `harness diagnose` from {spec_path}: {header}, with every change found applied "
             "(most costly first):"]
    lines += [f"#   {k}. {h.name} ({h.culprit})" for k, h in enumerate(causes, 1)] or ["#   (none: the spec as it is)"]
    lines += [f"# {line}" for line in note.splitlines()]
    lines += ["# `harness check --spec` this file compares the same deployment against it.", f'extends = "{extends}"', ""]
    out.write_text("\n".join(lines) + "\n" + reference_toml(spec, recipe, preprocess, postprocess))
    written = load_spec(out)
    if (written.reference.recipe, resolve_auto(recipe, written.reference.preprocess)) != (recipe, preprocess) or any(
            plain(_result_value(written.reference, k)) != plain(v) for k, v in (postprocess or {}).items()):
        raise SpecError(f"{out}: the corrected spec does not read back as the reference it describes")
    return out


def _result_value(reference, key: str):
    """The value of a result-step key (``postprocess.KEY`` or ``recognition.KEY``) of a spec's reference."""
    section, _, name = result_key(key).partition(".")
    return (getattr(reference, section, None) or {}).get(name)


def corrected(spec: Spec, recipe: str, preprocess: Preprocess, postprocess: Mapping[str, Any] | None = None) -> Spec:
    """The spec :func:`corrected_spec` writes, in memory: ``spec`` extended by the corrected
    ``[reference]`` (what ``harness check --spec`` the written file reads)."""
    from harness.spec import extend_spec

    return extend_spec(spec, {"reference": reference_table(spec, recipe, preprocess, postprocess)},
                       f"{spec.source} (corrected by diagnose)")


def fingerprint(recipe: str, p: Preprocess) -> str:
    """A preprocessing in words, e.g. "RGB; stretched to 224x224 (the filter, torchvision on
    uint8); mean [...] std [...] on the 0-255 scale": each operation's ``describe``."""
    resize = operations.OPERATIONS["resize mode"].describe(p, recipe)
    how = operations.OPERATIONS["resize filter"].describe(p, recipe)
    crop = resize_mode.crop_words(p)
    return (f"{operations.OPERATIONS['channel order'].describe(p, recipe)}; {resize} ({how}){crop}; "
            f"{operations.OPERATIONS['normalization'].describe(p, recipe)}")
