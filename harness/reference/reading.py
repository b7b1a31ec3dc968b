"""``--reference`` as the training definition users have: ``torchvision:WEIGHTS``, ``timm:PATH``
or ``timm:MODEL``, ``hf:PATH[:BACKEND]``, or their own transforms (``file.py:NAME``).

Each is read into the spec's operations (:mod:`harness.reference.frameworks`): a
:class:`Reading`. The run's reference is the framework's own transform where the framework is
installed (the truth: the reading is then proven on the run's own photos, :func:`prove`), else
the spec's replay by the built-in recipe of the framework's library, and the report says so.

- ``torchvision:ResNet50_Weights.IMAGENET1K_V2``: the weights' ``transforms()`` (no weights
  are downloaded: a preset is its parameters);
- ``timm:PATH`` a model card's ``config.json`` (its ``pretrained_cfg``), or a folder holding
  one; ``timm:MODEL_NAME`` (``convnext_tiny.fb_in1k``) where timm is installed;
- ``hf:PATH`` a ``preprocessor_config.json`` or a folder holding one, on transformers 5's default
  backend (torchvision, once "fast"); ``hf:PATH:pil`` (or ``:slow``) for the PIL one,
  ``hf:PATH:torchvision`` (``:fast``) to say so. The backends' pixels differ and a config does
  not record which one training used.

A config file needs no framework installed; timm and transformers come with the
``frameworks`` extra (``pip install 'triton-preprocessing-harness[frameworks]'``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.errors import install_hint
from harness.reference.frameworks import NotReadable, Read, processor_class
from harness.result import one_line
from harness.spec import SpecError

PREFIXES = ("torchvision:", "timm:", "hf:")
HF_CONFIG = "preprocessor_config.json"
TIMM_CONFIG = "config.json"
BACKEND_NAMES = {"torchvision": "torchvision", "fast": "torchvision", "pil": "pil", "slow": "pil"}
INSTALL = install_hint("frameworks")
INPUT_EXACT = 1e-5
"""The largest model-input difference still "exact": float32 normalizations computed in another
order (``(x / 255 - m) / s`` against ``(x - 255 m) / (255 s)``) differ by a few units in the last place."""


@dataclass(frozen=True)
class Reading:
    """A training definition read into the spec's operations."""

    source: str
    """As the user gave it (``hf:models/vit``)."""
    framework: str
    """What was read, in words (``Hugging Face ViTImageProcessor, torchvision backend (transformers 5's default)``)."""
    noun: str
    """What the framework's own transform is called in a sentence (``the processor``)."""
    read: Read | None = None
    """The spec's operations and the recipe replaying them; None: refused (:attr:`refused`)."""
    refused: str | None = None
    """What no spec operation holds, by name."""
    own: Callable[[Any], Any] | None = None
    """The framework's own transform (a PIL image -> the model input, or a Compose); None: the
    framework is not installed (:attr:`missing`)."""
    missing: str | None = None

    @property
    def preprocess(self):
        return self.read.preprocess if self.read is not None else None

    def require(self) -> Read:
        """The operations read, or :class:`NotReadable` saying what was refused."""
        if self.read is None:
            raise NotReadable(f"{self.source}: {self.refused}")
        return self.read


def is_framework_source(text: str | None) -> bool:
    return bool(text) and text.startswith(PREFIXES)


def read_source(text: str) -> Reading:
    """``torchvision:``, ``timm:`` or ``hf:`` read (:class:`SpecError` for a source that is not there)."""
    kind, _, rest = text.partition(":")
    if not rest:
        raise SpecError(f"--reference {text}: name what to read after '{kind}:'")
    return {"torchvision": _torchvision, "timm": _timm, "hf": _hf}[kind](text, rest)


def read_transform(obj: Any, source: str) -> Reading:
    """The user's own transforms (a Compose, a preset): read where they can be, refused by name otherwise."""
    from harness.reference.frameworks import read_transforms

    try:
        read, refused = read_transforms(obj), None
    except NotReadable as exc:
        read, refused = None, str(exc)
    notes = "".join(f"; {note}" for note in (read.notes if read else ()))  # what a step was read as, said where it is named
    return Reading(source, f"torchvision {type(obj).__name__}{notes}", f"your {type(obj).__name__}", read, refused, obj)


def _torchvision(source: str, name: str) -> Reading:
    from torchvision.models import get_weight

    from harness.reference.frameworks import read_transforms

    try:
        weights = get_weight(name)
    except (ValueError, AttributeError, KeyError, TypeError) as exc:  # TypeError: resnet50.DEFAULT (a function's)
        raise SpecError(f"--reference {source}: torchvision has no weights {name!r} ({exc}); e.g. "
                        "torchvision:ResNet50_Weights.IMAGENET1K_V2") from None
    preset = weights.transforms()
    try:
        read, refused = read_transforms(preset), None
    except NotReadable as exc:
        read, refused = None, str(exc)
    return Reading(source, f"torchvision {name}.transforms() ({type(preset).__name__})", "the weights' transforms",
                   read, refused, preset)


def _json(path: Path, what: str, source: str) -> dict:
    from harness.files import read_limited

    try:
        table = json.loads(read_limited(path, 2 ** 20, what).decode("utf-8"))
    except FileNotFoundError:
        raise SpecError(f"--reference {source}: {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"--reference {source}: {path} is not a JSON {what}: {exc}") from None
    if not isinstance(table, dict):
        raise SpecError(f"--reference {source}: {path} holds a {type(table).__name__}, not a JSON object")
    return table


def _timm(source: str, rest: str) -> Reading:
    from harness.reference.frameworks import read_timm

    path = Path(rest)
    if path.exists():
        file = path / TIMM_CONFIG if path.is_dir() else path
        table = _json(file, "timm config", source)
        cfg = table.get("pretrained_cfg", table if "input_size" in table else None)
        if not isinstance(cfg, dict):
            raise SpecError(f"--reference {source}: {file} has no pretrained_cfg (a timm model card's config.json has "
                            "one, with input_size, interpolation, crop_pct, crop_mode, mean and std)")
        where, name = str(file), table.get("architecture") or file.parent.name
    else:
        try:
            import timm
        except ImportError:
            raise SpecError(f"--reference {source}: no such file, and timm is not installed to resolve a model name "
                            f"({INSTALL}); or give a model card's config.json: timm:PATH") from None
        found = timm.get_pretrained_cfg(rest)
        if found is None:
            raise SpecError(f"--reference {source}: timm knows no model {rest!r} (e.g. convnext_tiny.fb_in1k)")
        cfg, where, name = found.to_dict(), f"timm's {rest}", rest
    try:
        read, refused = read_timm(cfg, where), None
    except NotReadable as exc:
        read, refused = None, str(exc)
    own, missing = None, None
    try:
        from timm.data import create_transform, resolve_data_config

        own = create_transform(**resolve_data_config(pretrained_cfg=dict(cfg)))
    except ImportError:
        missing = f"timm is not installed ({INSTALL})"
    except Exception as exc:  # noqa: BLE001 - timm raises many kinds for a config it cannot use
        raise SpecError(f"--reference {source}: timm cannot make its transforms: {one_line(exc)}") from None
    return Reading(source, f"timm pretrained_cfg of {name}", "timm's transforms", read, refused, own, missing)


def _hf(source: str, rest: str) -> Reading:
    from harness.reference.frameworks import read_hf

    path_text, _, backend = rest.rpartition(":")
    if backend not in BACKEND_NAMES:
        path_text, backend, said = rest, "torchvision", False
    else:
        backend, said = BACKEND_NAMES[backend], True
    path = Path(path_text)
    file = path / HF_CONFIG if path.is_dir() else path
    config = _json(file, "preprocessor config", source)
    if "auto_map" in config:  # refused before transformers is imported: nothing could offer to run it
        raise SpecError(f"--reference {source}: {file} has auto_map: its processor is the folder's own Python code, "
                        "which the harness never runs; name a transformers processor in image_processor_type")
    name = processor_class(config) or "image processor"
    how = f"{backend} backend" + ("" if said else f" (transformers 5's default; {source}:pil for the PIL one)")
    try:
        read, refused = read_hf(config, backend, str(file)), None
    except NotReadable as exc:
        read, refused = None, str(exc)
    own, missing = None, None
    try:
        import transformers  # noqa: F401 - only to know it is there; the processor is made below
    except ImportError:
        missing = f"transformers is not installed ({INSTALL})"
    else:
        _require_known_class(processor_class(config), source)  # no class named: transformers says what it lacks
        own = _hf_processor(config, backend, source)
    return Reading(source, f"Hugging Face {name}, {how}", "the processor", read, refused, own, missing)


def _require_known_class(name: str, source: str) -> None:
    """A processor class neither transformers nor the reader knows, said in one line (transformers' own
    message lists its 200 model types and names the folder it was given, a temporary one for a file).
    (A config with ``auto_map`` never gets here: refused before transformers is imported.)"""
    from transformers import __version__
    from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name

    from harness.reference.frameworks import HF_PROCESSORS

    if not name or get_image_processor_class_from_name(name) is not None:
        return
    raise SpecError(f"--reference {source}: image_processor_type {name}: transformers {__version__} has no such processor "
                    f"class (read as a spec: {', '.join(HF_PROCESSORS)})")


def _hf_processor(config: dict, backend: str, source: str):
    """The processor itself from ``config`` (the table read and checked above), on ``backend``.
    transformers is given a folder holding only that table, and neither the user's folder (its
    ``config.json``, its ``.py`` files) nor remote code: nothing is downloaded, nothing of the
    folder's runs."""
    import tempfile

    from transformers import AutoImageProcessor

    with tempfile.TemporaryDirectory(prefix="harness-hf-") as folder:
        (Path(folder) / HF_CONFIG).write_text(json.dumps(config))
        try:
            processor = AutoImageProcessor.from_pretrained(folder, backend=backend, local_files_only=True,
                                                           trust_remote_code=False)
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a config it cannot use
            raise SpecError(f"--reference {source}: transformers cannot make the processor: {one_line(exc)}") from None
    if getattr(processor, "backend", backend) != backend:
        raise SpecError(f"--reference {source}: transformers made a {processor.backend} processor, not {backend}")
    return processor


# -- the run's reference ------------------------------------------------------------------------------

def reading_recipe(reading: Reading):
    """The run's reference recipe for a reading: the framework's own transform where it is installed
    (a Compose's stages captured), else the spec's replay by the library's built-in recipe."""
    from harness.reference.base import BUILT_IN
    from harness.reference.custom import CallableRecipe, ComposeRecipe, is_compose

    if reading.own is not None:
        recipe = ComposeRecipe(reading.own, reading.source) if is_compose(reading.own) else \
            CallableRecipe(reading.own, reading.source, pil=True)
        recipe.describe = lambda: reading.framework  # noqa: E731 - what the report names
    else:
        read = reading.require()
        recipe = BUILT_IN[read.recipe](read.preprocess)
        recipe.name = reading.source
        recipe.describe = lambda: f"{reading.framework}, replayed by the spec's {read.recipe} recipe ({reading.missing})"
    recipe.reading = reading
    return recipe


# -- the proof ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    image: str
    stage: str
    size: str
    """How large, in words (``14 levels``, ``shape 224x298 against 224x299``)."""


@dataclass(frozen=True)
class ReadingProof:
    """The spec's replay against the framework's own output on the run's photos."""

    reading: Reading
    images: int = 0
    exact: int = 0
    differences: tuple[Difference, ...] = ()
    """The first stage that differs, per image that differs."""
    failed: int = 0
    """Images the framework (or the replay) could not process."""
    input_error: float = 0.0
    """The largest model-input difference among the exact images (float rounding)."""

    @property
    def proven(self) -> bool:
        return self.reading.own is not None and self.reading.read is not None

    @property
    def passed(self) -> bool:
        """Proven, and the replay exact on every photo both processed."""
        return self.proven and not self.differences and self.exact > 0

    def line(self) -> str:
        """The report's first line: what was read, and how exactly it is replayed."""
        r = self.reading
        head = f"read from {r.source} ({r.framework})"
        if r.read is None:
            return f"{head}: not read as a spec: {r.refused}; {r.noun} compared as {'it is' if r.own else 'nothing'}"
        if r.own is None:
            return f"{head}: not proven on the photos: {r.missing}; the spec's replay ({r.read.recipe} recipe) is the reference"
        failed = f" ({self.failed} failed)" if self.failed else ""
        if not self.differences:
            within = "bit for bit" if self.input_error == 0 else f"model input within {self.input_error:.2g}: float32 rounding"
            return f"{head}: replays {r.noun} exactly on {self.exact} of {self.images} photos{failed} ({within})"
        first = self.differences[0]
        stages = sorted({d.stage for d in self.differences})
        return (f"{head}: replays {r.noun} exactly on {self.exact} of {self.images} photos{failed}; differs on "
                f"{len(self.differences)} at {', '.join(stages)} (first {first.image}: {first.stage}, {first.size})")

    def to_dict(self) -> dict:
        return {"source": self.reading.source, "framework": self.reading.framework, "proven": self.proven,
                "images": self.images, "exact": self.exact, "failed": self.failed, "input_error": self.input_error,
                "refused": self.reading.refused, "missing": self.reading.missing,
                "differences": [vars(d) for d in self.differences], "line": self.line()}


def prove(recipe, items) -> ReadingProof | None:
    """The reading of ``recipe`` (a :func:`reading_recipe`, or a user's Compose) proven on ``items``
    (``(name, bytes)``): the framework's own stages against the spec's replay, stage by stage;
    None for a recipe that is no reading."""
    from harness.reference.base import BUILT_IN

    reading = getattr(recipe, "reading", None)
    if reading is None:
        return None
    if not (reading.own is not None and reading.read is not None):
        return ReadingProof(reading)
    replay = BUILT_IN[reading.read.recipe](reading.read.preprocess)
    images = exact = failed = 0
    differences, input_error = [], 0.0
    for name, data in items:
        try:
            own, spec = recipe(data), replay(data)
        except Exception:  # noqa: BLE001 - an image one side cannot process is counted, the check lists why
            failed += 1
            continue
        images += 1
        difference = _first_difference(name, own, spec)
        if difference is None:
            exact += 1
            input_error = max(input_error, float(np.abs(np.asarray(own["input"], np.float64) - spec["input"]).max()))
        else:
            differences.append(difference)
    return ReadingProof(reading, images, exact, tuple(differences), failed, input_error)


def _first_difference(name: str, own: dict, spec: dict) -> Difference | None:
    from harness.stage import PREPROCESS_STAGES, Stage

    for stage in PREPROCESS_STAGES:
        if stage not in own or stage not in spec:
            continue
        a, b = np.asarray(own[stage], np.float64), np.asarray(spec[stage], np.float64)
        if a.shape != b.shape:
            return Difference(name, str(stage), f"shape {'x'.join(map(str, a.shape))} against {'x'.join(map(str, b.shape))}")
        error = float(np.abs(a - b).max()) if a.size else 0.0
        if stage is Stage.INPUT and error > INPUT_EXACT:
            return Difference(name, str(stage), f"max |diff| {error:.3g}")
        if stage is not Stage.INPUT and error > 0:
            return Difference(name, str(stage), f"max {error:g} levels")
    return None


def proven_reference(recipe, paths):
    """(the run's reference recipe, the report's first line) for ``recipe`` on the files ``paths``.

    A training definition read (:attr:`Recipe.reading`) is proven on these files; where the
    spec's replay is exact on every one of them, the replay is the reference (it gives every stage,
    decode, resize and crop too, where a framework's transform gives only its output: so a check
    says at which operation a deployment departs), else the framework's own transform stays the
    reference. A recipe that is no reading is returned as it is, with no line."""
    from harness.reference.base import BUILT_IN

    reading = getattr(recipe, "reading", None)
    if reading is None:
        return recipe, None

    def items():
        for path in paths:
            try:
                yield Path(path).name, Path(path).read_bytes()
            except OSError:
                continue  # the run lists the file with its reason

    proof = prove(recipe, items())
    if not proof.passed:
        return recipe, proof.line()
    replay = BUILT_IN[reading.read.recipe](reading.preprocess)
    replay.name, replay.reading = recipe.name, reading
    replay.describe = lambda: (f"{reading.framework}: the spec read from it, replayed by the {reading.read.recipe} "  # noqa: E731
                               f"recipe (exact on these {proof.images} photos), every stage")
    return replay, proof.line()
