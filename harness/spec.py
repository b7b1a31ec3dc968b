"""The preprocessing spec: one TOML file holds every preprocessing parameter.

The deployed pipelines (the DALI model, the OpenCV model, both profiles) read the base
sections; the harness's reference recipe reads the same sections with the ``[reference]``
overrides applied, which is how a spec says "training did this differently".

This module imports only the standard library (and :mod:`harness.errors` and
:mod:`harness.postprocessing`, which do too): it also runs inside the Triton container, where
the DALI backend imports the model repository's ``dali.py``. It imports no task: a task's own
table (OCR's ``[recognition]``) is checked by the function its module registers
(:func:`register_table`).

A spec file looks like this (every key has a default, see the dataclasses)::

    [decode]
    exif_orientation = true
    hw_decoder_load = 0         # GPU decode without the hardware JPEG engine (default: DALI's)
    [resize]
    mode = "shorter_side"       # or "stretch"; detectors: "letterbox" (YOLO), "limit_side" (PaddleOCR)
    size = 256
    interpolation = "linear"
    antialias = false
    [crop]
    size = [224, 224]
    [normalize]
    pixel_range = 255.0
    divide_by = "range"         # or "max": by the image's own maximum first (rembg)
    mean = [127.0, 127.0, 127.0]
    std = [128.0, 128.0, 128.0]
    [input]
    channel_order = "RGB"
    [reference]
    recipe = "opencv"
    [reference.resize]          # training differed from deployment here
    antialias = true

A detector's spec resizes with ``letterbox`` (``size``, ``pad_value``, ``pad_position``,
``pad_rounding``, ``stride``, ``auto``, ``scaleup``) or ``limit_side`` (``limit_side_len``,
``limit_type``, ``multiple``, ``max_side``); it has no ``[crop]`` (the ``crop`` stage is the
model-input canvas: the letterbox's padded image, or the resized image as it is) and a
``[postprocess]`` table (``name = "db"`` or ``"yolo"`` and its parameters:
:mod:`harness.postprocessing` declares them), which ``[reference.postprocess]`` may override::

    [resize]
    mode = "limit_side"
    limit_side_len = 736
    limit_type = "min"
    [postprocess]
    name = "db"
    thresh = 0.3

``extends = "other.toml"`` (relative to the file) starts from another spec and overrides
only the keys given. For a deployment discovered on the server (``--model``), a
``[deployment.stages]`` table sets which stage a step's output is compared as (the same
as ``--stage STEP=STAGE``; the command line wins)::

    [deployment.stages]
    jpeg_to_tensor = "crop"     # or "step_model.tensor" = "none"
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness import operations, postprocessing
from harness.errors import HarnessError
from harness.operations import channels, decode, normalization, resize_filter, resize_mode
from harness.operations import crop as crop_operation

SPEC_FILENAME = "preprocessing.toml"
"""Name of the spec at the root of a model repository; every model there reads it unless its
config names another with a ``spec`` parameter (the detector's models: ``detection.toml``)."""
SPEC_PARAMETER = "spec"
"""The model-config parameter naming the spec file (at the repository root) a model reads."""


def spec_name_of(config: Mapping[str, Any]) -> str:
    """The spec file a model reads, from its config as the Python backend hands it over (JSON):
    its ``spec`` parameter, else :data:`SPEC_FILENAME`."""
    value = config.get("parameters", {}).get(SPEC_PARAMETER, {}).get("string_value")
    return value or SPEC_FILENAME

DETECTOR_MODES = resize_mode.DETECTOR_MODES
DTYPES = ("uint8", "float32")
RECIPES = ("opencv", "torchvision", "torch", "dali")


class SpecError(HarnessError, ValueError):
    """A spec file is missing, malformed, or asks for something unsupported."""


@dataclass(frozen=True)
class DecodeSpec:
    """JPEG decoding (:mod:`harness.operations.decode`). Defaults match libjpeg-turbo as OpenCV and PIL use it."""

    exif_orientation: bool = decode.EXIF_ORIENTATION.default
    """Rotate the image as its EXIF orientation tag says (cv2 and DALI do by default, PIL not)."""
    fancy_upsampling: bool = decode.FANCY_UPSAMPLING.default
    """Smooth chroma upsampling like libjpeg; DALI's GPU decoder needs it set explicitly."""
    fast_idct: bool = decode.FAST_IDCT.default
    """libjpeg's fast, less accurate integer IDCT (DALI ``use_fast_idct``)."""
    hw_decoder_load: float | None = decode.HW_DECODER_LOAD.default
    """The share of each batch DALI's GPU decoder hands to the GPU's hardware JPEG engine
    (A100, H100, H200; DALI ``hw_decoder_load``), 0 to 1; None: DALI's default (0.9 in 2.1.1).
    ``harness preflight`` compares the engine's decode with the CUDA decoder's on a GPU host:
    set 0 if they differ. CPU decoders and the reference recipes ignore it."""


@dataclass(frozen=True)
class ResizeSpec:
    """Resize before the crop. Output sizes round half up, as DALI rounds them."""

    mode: str = resize_mode.MODE.default
    """``shorter_side``: scale so the shorter side is ``size``, keeping the aspect ratio;
    ``stretch``: scale to exactly ``size`` (an int for a square, or [height, width])."""
    size: tuple[int, ...] = (256,)
    interpolation: str = resize_filter.INTERPOLATION.default
    antialias: bool = resize_filter.ANTIALIAS.default
    """Low-pass filter when scaling down (DALI and PIL do by default, cv2 INTER_LINEAR cannot)."""
    dtype: str = "uint8"
    """Resize output type: ``uint8`` rounds to integers, ``float32`` keeps fractions."""
    size_rounding: str = resize_mode.SIZE_ROUNDING.default
    """How the kept-aspect side's length rounds in ``shorter_side`` mode: ``half_up`` (DALI),
    ``floor`` (torchvision's int(), and a hand-written ``int(w * 256 / h)``), or ``auto``: the
    library's own."""
    resampling: str = resize_filter.RESAMPLING.default
    """How the filter is applied: ``auto``, the library's own; ``pil``, as PIL resizes (and
    torchvision's antialiased tensor resize, which follows it): the filter's taps that fall
    outside the image are dropped and the rest renormalized (DALI and OpenCV repeat the edge
    pixel instead), and a ``uint8`` resize goes through an 8-bit intermediate (rounded and
    clipped) between its two passes, in Pillow 13's order (vertically first where the height
    shrinks by more than twice as many pixels as the width; torch's uint8 kernel always goes
    horizontally first, so it follows only where Pillow does too). The DALI graph then replays
    PIL within a level or two (:mod:`harness.preprocessing.dali_pil`); it needs ``antialias =
    true``, as PIL always filters, and a linear, cubic or Lanczos filter."""
    # letterbox (YOLO): scale to fit ``size`` keeping the aspect ratio, then pad
    pad_value: int = 114
    """The padding's grey level (YOLO trains with 114)."""
    pad_position: str = resize_mode.PAD_POSITION.default
    """``center``: the padding split between both sides; ``top_left``: all of it at the bottom
    and right (what DALI's ``fn.pad`` gives: the port bug of ultralytics #20573)."""
    pad_rounding: str = resize_mode.PAD_ROUNDING.default
    """How an odd padding splits: ``yolo`` (``round(d/2 -+ 0.1)``: the odd pixel after) or
    ``half_up`` (the odd pixel before)."""
    stride: int = 32
    auto: bool = False
    """Pad only up to the next multiple of ``stride`` (a rectangle, not ``size``)."""
    scaleup: bool = True
    """False: never enlarge, only shrink (YOLO's validation)."""
    # limit_side (PaddleOCR's detector): scale a side to ``limit_side_len``, sides to multiples
    limit_side_len: int = 736
    limit_type: str = resize_mode.LIMIT_TYPE.default
    """``min``: enlarge until the shorter side is ``limit_side_len``; ``max``: shrink until the
    longer side is."""
    multiple: int = 32
    """Each resized side is rounded to a multiple of this (Python's round)."""
    max_side_limit: int | None = None
    """PaddleOCR's cap: a resized image longer than this is scaled down to it before the
    rounding (None, the key absent: no cap, as rapidocr)."""
    max_side: int = 2048
    """The longest model-input side a ``limit_side`` deployment takes (its TensorRT engine's
    optimization profile ends there); an image whose input would be longer is refused."""

    def extent(self) -> str:
        """The resize's own parameters in words (``shorter_side [256]``, ``limit_side 736 (min, x32)``,
        ``letterbox [640, 640] (pad 114 center)``), for the recipes' descriptions."""
        if self.mode == "limit_side":
            return f"limit_side {self.limit_side_len} ({self.limit_type}, x{self.multiple})"
        if self.mode == "letterbox":
            return (f"letterbox {[self.size[0], self.size[-1]]} (pad {self.pad_value} {self.pad_position}"
                    + (f", auto x{self.stride}" if self.auto else "") + ("" if self.scaleup else ", no scaleup") + ")")
        return f"{self.mode} {list(self.size)}"

    @property
    def cropped(self) -> str:
        """What the ``crop`` stage does, in words: a center crop, a letterbox's padding, or nothing."""
        return {"letterbox": "pad", "limit_side": "no crop"}.get(self.mode, "center crop")

    @property
    def stretches(self) -> bool:
        """A stretch to exactly ``size`` (the aspect ratio not kept)."""
        return self.mode == "stretch"

    @property
    def for_detector(self) -> bool:
        """A detector's resize (letterbox, limit_side): it makes the model input itself."""
        return self.mode in DETECTOR_MODES

    def detector(self):
        """This resize as :mod:`harness.geometry`'s record (``Letterbox`` or ``LimitSide``)."""
        from harness.geometry import Letterbox, LimitSide

        if self.mode == "letterbox":
            return Letterbox((self.size[0], self.size[-1]), self.pad_value, self.pad_position, self.pad_rounding,
                             self.stride, self.auto, self.scaleup)
        if self.mode == "limit_side":
            return LimitSide(self.limit_side_len, self.limit_type, self.multiple, self.max_side_limit)
        raise SpecError(f"resize.mode {self.mode!r} is not a detector's resize ({', '.join(DETECTOR_MODES)})")

    def geometry(self, height: int, width: int):
        """What a detector resize does to an image of this size (:class:`harness.geometry.Geometry`:
        resized size, padding, model input size); a ``stretch`` too (a detector fed a stretched
        image: its crop takes the whole of it)."""
        from harness.geometry import Geometry, geometry

        if self.mode == "stretch":
            return Geometry((height, width), (self.size[0], self.size[-1]))
        return geometry(height, width, self.detector())

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after resizing an image of the given size (``auto`` rounds half up;
        a letterbox's before its padding)."""
        if self.for_detector:  # its geometry: the same arithmetic, checked (an empty or too thin image)
            return self.geometry(height, width).resized
        return resize_mode.output_size(height, width, self)


@dataclass(frozen=True)
class CropSpec:
    """Center crop after the resize (:mod:`harness.operations.crop`: its keys, offsets and kernels)."""

    size: tuple[int, int] = crop_operation.SIZE.default
    offset_rounding: str = crop_operation.OFFSET_ROUNDING.default

    def offsets(self, height: int, width: int) -> tuple[int, int]:
        """(top, left) of the centered crop window in an image of the given size (``auto``: half up)."""
        return crop_operation.offsets(self, height, width)


@dataclass(frozen=True)
class NormalizeSpec:
    """``(pixel / 255 * pixel_range - mean) / std``, per channel in model channel order."""

    pixel_range: float = normalization.PIXEL_RANGE.default
    """255 keeps raw pixel values; 1.0 is torchvision's ``ToTensor()`` scaling."""
    mean: tuple[float, float, float] = normalization.MEAN.default
    std: tuple[float, float, float] = normalization.STD.default
    divide_by: str = normalization.DIVISOR.default
    """``range``: pixels as they are (0 to 255, then ``pixel_range``); ``max``: first scaled by
    255 over the resized image's own maximum (over every pixel and channel), so its brightest
    value is 255: rembg's ``im / np.max(im)`` before its mean and std (an all-black image is
    left as it is)."""

    def mean_std_in_pixels(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """mean and std on the 0-255 pixel scale, as DALI's crop_mirror_normalize takes them."""
        k = 255.0 / self.pixel_range
        return tuple(m * k for m in self.mean), tuple(s * k for s in self.std)


@dataclass(frozen=True)
class InputSpec:
    """The model input tensor: float32, NCHW."""

    channel_order: str = channels.KEY.default


@dataclass(frozen=True)
class Preprocess:
    """Every parameter of one preprocessing pipeline, from file bytes to model input."""

    decode: DecodeSpec = DecodeSpec()
    resize: ResizeSpec = ResizeSpec()
    crop: CropSpec = CropSpec()
    normalize: NormalizeSpec = NormalizeSpec()
    input: InputSpec = InputSpec()

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one model input; -1 for a side that varies by image
        (a ``limit_side`` resize, an ``auto`` letterbox)."""
        r = self.resize
        if r.mode == "letterbox" and not r.auto:
            return (3, r.size[0], r.size[-1])
        if r.for_detector:
            return (3, -1, -1)
        return (3, *self.crop.size)


@dataclass(frozen=True)
class Reference:
    """The training-time preprocessing the harness replays: a recipe and its parameters."""

    recipe: str = "opencv"
    preprocess: Preprocess = Preprocess()
    postprocess: Mapping[str, Any] | None = None
    """The ``[postprocess]`` table training evaluated with (``[reference.postprocess]`` over the
    deployed one); None: none (a classifier, an embedder)."""
    recognition: Mapping[str, Any] | None = None
    """The ``[recognition]`` table training read text with (``[reference.recognition]`` over the
    deployed one); None: no recognizer."""


@dataclass(frozen=True)
class Spec:
    """A whole spec file: the deployed preprocessing, the reference, and comparison settings."""

    preprocess: Preprocess = Preprocess()
    reference: Reference = Reference()
    tolerances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Per-stage overrides of the comparison tolerances, e.g. ``{"resize": {"atol": 2}}``."""
    source: str = "<defaults>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The merged TOML table, as written to reports."""
    deployed_stages: Mapping[str, str] = field(default_factory=dict)
    """``[deployment.stages]``: step model (or ``step.tensor``) -> stage, for a discovered deployment."""
    postprocess: Mapping[str, Any] | None = None
    """The deployed ``[postprocess]`` table (a detector's: ``name`` and its parameters,
    :mod:`harness.postprocessing`); None: the spec has none."""
    recognition: Mapping[str, Any] | None = None
    """The deployed ``[recognition]`` table (an OCR pipeline's recognizer: crop, input, decoding,
    checked by the function :mod:`harness.ocr.recognition` registers); None: the spec has none."""


TABLES: dict[str, Callable[[Mapping[str, Any]], object]] = {"postprocess": postprocessing.parameters}
"""The tables beyond the preprocessing, each checked by its owner's function (which builds the
table's parameter record: TypeError or ValueError on an unknown key or a bad value). The spec's
own: ``[postprocess]`` (:mod:`harness.postprocessing`, every task's postprocessings); a task's
own table is registered by the module that reads it (:func:`register_table`: OCR's
``[recognition]``, by :mod:`harness.ocr.recognition`). A table whose owner this process has not
imported is kept as written, and checked by the owner when it reads it (it always parses it)."""


def register_table(name: str, check: Callable[[Mapping[str, Any]], object]) -> None:
    """The spec's ``[name]`` and ``[reference.name]`` are checked by ``check`` from now on."""
    TABLES[name] = check


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file (following ``extends``)."""
    path = Path(path)
    table = _read_with_extends(path, seen=())
    return parse_spec(table, source=str(path))


def extend_spec(spec: Spec, table: Mapping[str, Any], source: str) -> Spec:
    """The spec a file holding ``extends`` = ``spec``'s file and ``table`` reads as."""
    return parse_spec(_merge(spec.raw, table), source)


def parse_spec(table: Mapping[str, Any], source: str = "<table>") -> Spec:
    """Validate a spec table (as read from TOML) into a :class:`Spec`."""
    table = dict(table)
    table.pop("extends", None)
    unknown = set(table) - {"decode", "resize", "crop", "normalize", "input", "postprocess", "reference", "tolerances",
                            "deployment", "recognition"}
    if unknown:
        raise SpecError(f"{source}: unknown section(s) {sorted(unknown)}")
    try:
        base = _preprocess(table, source)
        ref_table = _table(f"{source}: [reference]", table.get("reference", {}))
        recipe = ref_table.pop("recipe", "opencv")
        _check_choice(f"{source}: reference.recipe", recipe, RECIPES + ("custom",))
        merged = _merge(table, ref_table)
        postprocess = _postprocess(f"{source}: [postprocess]", table.get("postprocess"))
        recognition = _postprocess(f"{source}: [recognition]", table.get("recognition"), "recognition")
        reference = Reference(recipe, _preprocess(merged, f"{source} [reference]"),
                              _postprocess(f"{source}: [reference.postprocess]", merged.get("postprocess")),
                              _postprocess(f"{source}: [reference.recognition]", merged.get("recognition"), "recognition"))
        tolerances = _tolerances(source, table.get("tolerances", {}))
        deployment = _table(f"{source}: [deployment]", table.get("deployment", {}))
        stages = _table(f"{source}: [deployment.stages]", deployment.pop("stages", {}))
        if any(not isinstance(v, str) for v in stages.values()):
            raise SpecError(f"{source}: [deployment.stages] values are stage names (strings), got {stages}")
        if deployment:
            raise SpecError(f"{source}: unknown key(s) {sorted(deployment)} in [deployment]; it has `stages`")
    except SpecError:
        raise
    except (TypeError, KeyError, ValueError) as exc:
        raise SpecError(f"{source}: {exc}") from None
    for where, p, post in ((source, base, postprocess), (f"{source} [reference]", reference.preprocess,
                                                         reference.postprocess)):
        if post is not None and post.get("name") in ("db", "yolo") and not p.resize.for_detector:
            raise SpecError(f"{where}: [postprocess] makes boxes of a detector's output, but resize.mode is "
                            f"{p.resize.mode!r}; a detector resizes with one of {', '.join(DETECTOR_MODES)}")
    return Spec(base, reference, tolerances, source, raw=table, deployed_stages=stages, postprocess=postprocess,
                recognition=recognition)


def _postprocess(where: str, table, section: str = "postprocess") -> dict[str, Any] | None:
    """A ``[postprocess]`` table (or another of :data:`TABLES`, ``section``), checked by its
    owner's function (unknown names and keys, values out of range refused in one line); None
    when absent."""
    if table is None:
        return None
    table = _table(where, table)
    check = TABLES.get(section)
    if check is None:  # its owner is not imported here: it checks the table when it reads it
        return table
    try:
        check(table)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: {str(exc).removeprefix(f'[{section}] ')}") from None
    return table


TOLERANCE_KEYS = ("atol", "rtol", "max_fraction", "mean_atol")


def _table(where: str, value) -> dict:
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be a table, got {value!r}")
    return dict(value)


def _tolerances(source: str, table) -> dict[str, dict[str, float]]:
    """``[tolerances.<stage>]``: known stages, known keys, finite numbers >= 0 (a fraction <= 1)."""
    from harness.stage import STAGES

    out = {}
    for stage, values in _table(f"{source}: [tolerances]", table).items():
        where = f"{source}: [tolerances.{stage}]"
        if stage not in {str(s) for s in STAGES}:
            raise SpecError(f"{where}: no such stage; stages: {', '.join(map(str, STAGES))}")
        values = _table(where, values)
        unknown = set(values) - set(TOLERANCE_KEYS)
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; keys are {', '.join(TOLERANCE_KEYS)}")
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise SpecError(f"{where}: {key} must be a finite number >= 0, got {value!r}")
            if key == "max_fraction" and value > 1:
                raise SpecError(f"{where}: max_fraction is a fraction of the values, at most 1, got {value!r}")
        out[str(stage)] = {k: float(v) for k, v in values.items()}
    return out


def with_overrides(preprocess: Preprocess, **sections: Mapping[str, Any]) -> Preprocess:
    """A copy of ``preprocess`` with some keys replaced, e.g. ``resize={"antialias": True}``."""
    replaced = {
        name: dataclasses.replace(getattr(preprocess, name), **_coerce(name, dict(values)))
        for name, values in sections.items()
    }
    out = dataclasses.replace(preprocess, **replaced)
    _validate(out, "override")
    return out


def to_table(preprocess: Preprocess, postprocess: Mapping[str, Any] | None = None,
             recognition: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The preprocess sections as a plain TOML-shaped table (for reports and docs); a key
    left to its library's default (None) is left out, as TOML has no null. A detector's
    spec has no ``[crop]`` and shows only its own mode's resize keys; ``postprocess``: its
    ``[postprocess]`` table, appended as given."""
    out = {
        name: {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(getattr(preprocess, name)).items()
               if v is not None}
        for name in ("decode", "resize", "crop", "normalize", "input")
    }
    mode = preprocess.resize.mode
    out["resize"] = {k: v for k, v in out["resize"].items() if k not in _RESIZE_KEYS_OF_OTHER_MODES[mode]}
    if preprocess.resize.for_detector:
        del out["crop"]
    for key in operations.keys():
        if key.omitted_at_default and out.get(key.table, {}).get(key.name, ...) == key.default:
            del out[key.table][key.name]  # left out at its default, as before the key existed
    if postprocess is not None:
        out["postprocess"] = dict(postprocess)
    if recognition is not None:
        out["recognition"] = dict(recognition)
    return out


_LETTERBOX_KEYS = frozenset({"pad_value", "pad_position", "pad_rounding", "stride", "auto", "scaleup"})
_LIMIT_SIDE_KEYS = frozenset({"limit_side_len", "limit_type", "multiple", "max_side_limit", "max_side"})
_CLASSIFIER_KEYS = frozenset({"resampling"})
"""The resampling key of the classifiers' resizes (a detector's resize is OpenCV's bilinear)."""
_RESIZE_KEYS_OF_OTHER_MODES = {
    "shorter_side": _LETTERBOX_KEYS | _LIMIT_SIDE_KEYS,
    "stretch": _LETTERBOX_KEYS | _LIMIT_SIDE_KEYS | {"size_rounding"},
    "letterbox": _LIMIT_SIDE_KEYS | _CLASSIFIER_KEYS | {"size_rounding"},
    "limit_side": _LETTERBOX_KEYS | _CLASSIFIER_KEYS | {"size_rounding", "size"},
}
"""Resize keys that mean nothing in a mode: left out of its table (and ignored when read)."""


# -- internals ---------------------------------------------------------------------------

_SECTIONS = {"decode": DecodeSpec, "resize": ResizeSpec, "crop": CropSpec, "normalize": NormalizeSpec, "input": InputSpec}


MAX_SPEC_BYTES = 2 ** 20
"""The largest spec file read (1 MiB; a spec is a few hundred bytes): a spec pointed at a
device or a huge file is refused, not read without end."""
MAX_EXTENDS = 16
"""How many specs deep ``extends`` may go."""


def _read_with_extends(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    from harness.files import read_limited

    try:
        path = path.resolve()
    except (OSError, RuntimeError) as exc:
        raise SpecError(f"spec file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if path in seen:
        raise SpecError(f"{path}: 'extends' loops back to itself")
    if len(seen) >= MAX_EXTENDS:
        raise SpecError(f"{path}: 'extends' goes more than {MAX_EXTENDS} specs deep")
    try:
        data = read_limited(path, MAX_SPEC_BYTES, "spec file")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}") from None
    except OSError as exc:
        raise SpecError(f"spec file {path}: {getattr(exc, 'reason', None) or exc.strerror or exc}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a text file (not UTF-8 at byte {exc.start}): a spec is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    parent = table.pop("extends", None)
    if parent is None:
        return table
    if not isinstance(parent, str) or not parent.strip():
        raise SpecError(f"{path}: 'extends' must be the path of another spec (a string), got {parent!r}")
    return _merge(_read_with_extends(path.parent / parent, seen + (path,)), table)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _preprocess(table: Mapping[str, Any], source: str) -> Preprocess:
    sections = {}
    for name, cls in _SECTIONS.items():
        values = _table(f"{source}: [{name}]", table.get(name, {}))
        known = {f.name for f in dataclasses.fields(cls)}
        if set(values) - known:
            raise SpecError(f"{source}: unknown key(s) {sorted(set(values) - known)} in [{name}]; known: {sorted(known)}")
        _check_types(f"{source}: [{name}]", cls, values)
        sections[name] = cls(**_coerce(name, values))
    out = Preprocess(**sections)
    _validate(out, source)
    return out


MAX_SIDE = 8192
"""The largest resize or crop side a spec may ask for (a model input is a few hundred
pixels; 100000 is a typing mistake that would allocate tens of gigabytes)."""


def _check_types(where: str, cls, values: Mapping[str, Any]) -> None:
    """Each value of the type its field holds (TOML's own types: a bool is not a number, a
    number not a bool; numbers finite, whole where the field holds ints; a number field
    also takes a list of them, its length checked by :func:`_validate`)."""
    import typing

    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        hint = hints[key]
        optional = [a for a in typing.get_args(hint) if a is not type(None)] if type(None) in typing.get_args(hint) else []
        if len(optional) == 1:  # ``int | None``: a key given holds the int (None is the key left out)
            hint = optional[0]
        if hint is bool and not isinstance(value, bool):
            raise SpecError(f"{where} {key} must be true or false, got {value!r}")
        if hint is str and not isinstance(value, str):
            raise SpecError(f"{where} {key} must be a string, got {value!r}")
        if typing.get_origin(hint) is tuple and key != "size" and not isinstance(value, list):
            raise SpecError(f"{where} {key} must be a list of numbers, got {value!r}")
        if hint in (int, float) or typing.get_origin(hint) is tuple:
            whole = hint is int or (hint is not float and float not in typing.get_args(hint))
            for number in value if isinstance(value, list) else [value]:
                if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                    raise SpecError(f"{where} {key} must be {'a finite number' if hint in (int, float) else 'finite numbers'}, "
                                    f"got {value!r}")
                if whole and not isinstance(number, int):
                    raise SpecError(f"{where} {key} must be whole numbers, got {value!r}")


def _coerce(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """TOML gives lists and ints; the dataclasses hold tuples and floats."""
    if section == "resize" and "size" in values:
        size = values["size"]
        values["size"] = tuple(size) if isinstance(size, (list, tuple)) else (size,)
    if section == "crop" and "size" in values:
        size = values["size"]
        values["size"] = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    for key in ("mean", "std"):
        if key in values:
            values[key] = tuple(float(v) for v in values[key])
    if "pixel_range" in values:
        values["pixel_range"] = float(values["pixel_range"])
    load = values.get("hw_decoder_load")
    if isinstance(load, int) and not isinstance(load, bool):
        values["hw_decoder_load"] = float(load)
    return values


def _check_choice(what: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SpecError(f"{what} = {value!r}; expected one of {', '.join(choices)}")


def _validate(p: Preprocess, source: str) -> None:
    _check_choice(f"{source}: resize.dtype", p.resize.dtype, DTYPES)
    for key in operations.keys():
        if key.applies is not None and not key.applies(p):
            continue
        if (wrong := key.check(getattr(getattr(p, key.table), key.name), f"{source}: ")) is not None:
            raise SpecError(wrong)
    if (wrong := operations.invalid(p)) is not None:
        raise SpecError(f"{source}: {wrong}")
    if p.resize.for_detector:
        _validate_detector(p, source)
        return _validate_normalize(p, source)
    size = p.resize.size
    if p.resize.mode == "shorter_side" and len(size) != 1:
        raise SpecError(f"{source}: resize.size must be one number in shorter_side mode, got {list(size)}")
    if not 1 <= len(size) <= 2 or any(not isinstance(s, int) or s <= 0 for s in size):
        raise SpecError(f"{source}: resize.size must be a positive int or [height, width], got {list(size)}")
    if len(p.crop.size) != 2 or any(not isinstance(s, int) or s <= 0 for s in p.crop.size):
        raise SpecError(f"{source}: crop.size must be [height, width] of positive ints, got {list(p.crop.size)}")
    for what, sides in (("resize.size", size), ("crop.size", p.crop.size)):
        if max(sides) > MAX_SIDE:
            raise SpecError(f"{source}: {what} {list(sides)} is larger than {MAX_SIDE} pixels a side")
    smallest = min(size) if p.resize.mode == "stretch" else size[0]
    if p.resize.mode == "stretch" and (size[0] < p.crop.size[0] or size[-1] < p.crop.size[1]):
        raise SpecError(f"{source}: crop.size {list(p.crop.size)} is larger than resize.size {list(size)}")
    if p.resize.mode == "shorter_side" and smallest < max(p.crop.size):
        raise SpecError(f"{source}: crop.size {list(p.crop.size)} is larger than the resized shorter side {smallest}")
    _validate_normalize(p, source)


def _validate_detector(p: Preprocess, source: str) -> None:
    """A letterbox or limit-side resize: its record builds (:mod:`harness.geometry`
    refuses what it cannot honour) and its sides stay within :data:`MAX_SIDE`."""
    from harness.geometry import GeometryError

    r = p.resize
    if r.mode == "letterbox" and (not 1 <= len(r.size) <= 2 or any(not isinstance(s, int) or s <= 0 for s in r.size)):
        raise SpecError(f"{source}: resize.size must be a positive int or [height, width], got {list(r.size)}")
    sides = {"resize.size": max(r.size)} if r.mode == "letterbox" else {"resize.limit_side_len": r.limit_side_len,
                                                                        "resize.max_side": r.max_side}
    for what, side in sides.items():
        if not 0 < side <= MAX_SIDE:
            raise SpecError(f"{source}: {what} = {side}: expected 1 to {MAX_SIDE} pixels")
    if r.mode == "limit_side" and r.max_side < r.limit_side_len:
        raise SpecError(f"{source}: resize.max_side {r.max_side} is shorter than resize.limit_side_len {r.limit_side_len}")
    if r.mode == "limit_side" and r.max_side % r.multiple:
        raise SpecError(f"{source}: resize.max_side {r.max_side} is not a multiple of resize.multiple {r.multiple}")
    if r.mode == "limit_side" and r.max_side_limit is not None and not 0 < r.max_side_limit <= r.max_side:
        raise SpecError(f"{source}: resize.max_side_limit {r.max_side_limit}: expected 1 to resize.max_side "
                        f"({r.max_side}), the longest input the deployment takes")
    try:
        r.detector()
    except GeometryError as exc:
        raise SpecError(f"{source}: resize: {exc}") from None


def _validate_normalize(p: Preprocess, source: str) -> None:
    n = p.normalize
    if len(n.mean) != 3 or len(n.std) != 3:
        raise SpecError(f"{source}: normalize.mean and normalize.std need 3 values each")
    if any(s == 0 for s in n.std) or n.pixel_range <= 0:
        raise SpecError(f"{source}: normalize.std and normalize.pixel_range must be non-zero")
    if not all(math.isfinite(v) for v in (*n.mean, *n.std, n.pixel_range)):
        raise SpecError(f"{source}: normalize.mean, std and pixel_range must be finite numbers")
