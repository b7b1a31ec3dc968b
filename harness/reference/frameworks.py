"""The training definition as users write it, read into the spec's operations.

- torchvision transforms: a v1 or v2 ``Compose`` (nested ones flattened), a weights preset
  (``ResNet50_Weights.IMAGENET1K_V2.transforms()``: ``ImageClassification``);
- timm's ``pretrained_cfg`` (``input_size``, ``interpolation``, ``crop_pct``, ``crop_mode``,
  ``mean``, ``std``), as ``timm.data.create_transform`` builds its evaluation transforms;
- a Hugging Face ``preprocessor_config.json`` (``do_resize``/``size``, ``resample``,
  ``do_center_crop``/``crop_size``, ``do_rescale``/``rescale_factor``, ``do_normalize``/
  ``image_mean``/``image_std``, ``do_convert_rgb``), with the defaults of its processor class,
  for the PIL or the torchvision backend.

Each reader returns a :class:`~harness.spec.Preprocess` and the built-in recipe that replays it
(``torchvision``: PIL; ``torch``: torchvision on uint8 tensors), or raises
:class:`NotReadable` naming what no spec operation holds: never an approximation. The roundings
are written out (``size_rounding = "floor"``: torchvision's and Hugging Face's ``int()``;
the crop's offsets: torchvision's ``round()`` or Hugging Face's floor), as is PIL's resampling
(``resize.resampling = "pil"``), so the DALI graph replays them (:mod:`harness.preprocessing.dali_pil`).
The image comes as PIL opens it (no EXIF rotation: ``decode.AS_PIL_OPENS``), as
torchvision's ``ImageFolder`` and the ``datasets`` library give it to a transform.

Standard library only at import: the frameworks are imported where an object is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from harness.errors import UsageError
from harness.operations import crop as center_crop
from harness.operations import decode, resize_filter, resize_mode
from harness.operations.channels import section as input_order
from harness.spec import SpecError, parse_spec
from harness.validation import LARGEST, require_int, require_number


class NotReadable(SpecError):
    """The training definition does something no spec operation holds (said by name)."""


@dataclass(frozen=True)
class Read:
    """What a reader found: the spec table of the preprocessing and the recipe replaying it."""

    table: Mapping[str, Any]
    recipe: str
    """``torchvision`` (PIL) or ``torch`` (torchvision on tensors)."""
    notes: tuple[str, ...] = ()
    """Steps read as something the spec already does, each said in words (an RGB conversion as the decode's)."""

    @property
    def preprocess(self):
        return parse_spec(dict(self.table), source="the training definition").preprocess


def _whole(where: str, key: str, value: Any, minimum: int = 1) -> int:
    """A config's whole number (a size, a filter code), or :class:`SpecError` naming the file and the key:
    ``NaN``, ``1e999``, ``"224"`` or ``[224]`` where transformers and timm read an int."""
    try:
        return require_int(key, value, minimum, 2 ** 31 - 1)
    except UsageError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _number(where: str, key: str, value: Any, minimum: float | None = None, maximum: float = LARGEST,
            above: float | None = None) -> float:
    """A config's finite number within bounds, or :class:`SpecError` naming the file and the key."""
    try:
        return require_number(key, value, minimum, maximum, above)
    except UsageError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _numbers(where: str, key: str, values: Any) -> list[float]:
    """A config's list of finite numbers (a mean, a std); their count is the spec's to check."""
    if not isinstance(values, (list, tuple)):
        raise SpecError(f"{where}: {key} must be a list of numbers, got {values!r}")
    return [_number(where, f"{key}[{k}]", v) for k, v in enumerate(values)]


MIN_CROP_PCT = 0.01
"""The smallest ``crop_pct`` read: a resize to ``size / crop_pct`` stays a size (``1e-320`` made it infinite)."""


# -- torchvision transforms --------------------------------------------------------------------

INTERPOLATIONS = {mode: interpolation for interpolation, mode in resize_filter.TORCHVISION.items()}
"""torchvision's ``InterpolationMode`` names (and PIL's resampling names) -> the spec's."""
IGNORED = ("ToPureTensor", "Identity")
"""Transforms that change no pixel."""
TO_FLOAT_SCALED = ("ToTensor",)
"""A PIL image to a float tensor on 0-1 (timm's ``MaybeToTensor`` is one by its base class)."""
TO_UINT8_TENSOR = ("PILToTensor", "ToImage", "ToImageTensor", "MaybePILToTensor")


def _kind(transform: Any, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that ``transform``'s class or a base class of it is called."""
    for cls in type(transform).__mro__:
        if cls.__name__ in names:
            return cls.__name__
    return None


def _flatten(transforms) -> list:
    out = []
    for t in transforms:
        out.extend(_flatten(t.transforms) if _kind(t, ("Compose",)) else [t])
    return out


def _interpolation(mode: Any, where: str) -> str:
    name = getattr(mode, "name", None) or str(mode).rsplit(".", 1)[-1].upper()
    if name not in INTERPOLATIONS:
        raise NotReadable(f"{where}: interpolation {name}: no spec interpolation holds it (it has "
                          f"{', '.join(INTERPOLATIONS.values())})")
    return INTERPOLATIONS[name]


PROBE_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV", "I", "I;16", "F")
"""PIL's modes an RGB-conversion step is tried on: every mode ``convert("RGB")`` takes (``La`` it does not)."""


def _probe_images() -> dict:
    """One small image of each of :data:`PROBE_MODES`, made here (the run's photos may all be RGB):
    colours, greys and an alpha channel that runs from transparent to opaque over coloured pixels."""
    from PIL import Image  # the frameworks' own library, imported where a step is tried

    width, height = 9, 7
    rgba = Image.frombytes("RGBA", (width, height), bytes((i * 37 + (i // 4) * 11) % 256 for i in range(width * height * 4)))
    images = {mode: rgba.convert(mode) for mode in PROBE_MODES if mode != "I;16"}
    # 16-bit greys across their whole range, not the 8-bit ones widened
    images["I;16"] = Image.frombytes("I;16", (width, height), bytes((i * 97) % 256 for i in range(width * height * 2)))
    return images


def _rgb_conversion(step: Any, name: str) -> str | None:
    """None where ``step`` (a function in a Compose: OpenAI CLIP's ``_convert_image_to_rgb``,
    open_clip's ``_convert_to_rgb``) gives PIL's ``convert("RGB")`` of an image of every mode, which is
    the decode's output (the spec decodes to RGB); else what differs, naming the modes."""
    differs: dict[str, list[str]] = {}  # how it differs -> the modes it differs on so
    for mode, image in _probe_images().items():
        try:
            out = step(image.copy())
        except Exception as exc:  # noqa: BLE001 - the user's step may raise anything; it is then not a conversion
            how = f"raises {type(exc).__name__}"
        else:
            if not (hasattr(out, "mode") and hasattr(out, "tobytes")):
                how = f"gives a {type(out).__name__}, not a PIL image"
            elif out.mode != "RGB":
                how = "not converted to RGB"
            elif out.size != image.size:
                how = "another size"
            elif out.tobytes() != image.convert("RGB").tobytes():
                how = "other pixels"
            else:
                continue
        differs.setdefault(how, []).append(mode)
    if not differs:
        return None
    return (f"{name}: no spec operation holds it: it is not PIL's convert(\"RGB\") (the decode's RGB output) on images "
            f"of mode " + "; ".join(f"{', '.join(modes)} ({how})" for how, modes in differs.items()))


def _is_function(transform: Any) -> bool:
    """A plain function or a torchvision ``Lambda``: a step known by what it does, not by its class."""
    import inspect

    return inspect.isfunction(transform) or inspect.isbuiltin(transform) or bool(_kind(transform, ("Lambda",)))


def _side(size: Any) -> list[int]:
    return [int(size)] if isinstance(size, int) else [int(s) for s in size]


def read_transforms(obj: Any) -> Read:
    """A torchvision ``Compose`` (v1 or v2) or weights preset, called on a PIL image, as the spec's
    operations. Raises :class:`NotReadable` naming the transform no operation holds."""
    if _kind(obj, ("ImageClassification",)):
        return _read_preset(obj)
    if _kind(obj, ("SemanticSegmentation", "ObjectDetection", "VideoClassification", "OpticalFlow")):
        raise NotReadable(f"{type(obj).__name__}: only ImageClassification presets are read (a classifier's "
                          "resize, crop and normalization)")
    transforms = _flatten(obj.transforms) if _kind(obj, ("Compose",)) else [obj]
    where = "pil"  # the image's form: a PIL image, a uint8 tensor, a float tensor
    scale = 255.0  # what 255 in the file is in the current values
    resize, crop, normalize, recipe = None, None, None, "torchvision"
    notes = []
    for t in transforms:
        name = type(t).__name__
        if _is_function(t):
            step = getattr(t, "lambd", t)
            name = f"Lambda({getattr(step, '__name__', '?')})" if step is not t else getattr(t, "__name__", name)
            if where != "pil":
                raise NotReadable(f"{name} on a tensor: a function is read only as an RGB conversion of the PIL image")
            if refused := _rgb_conversion(step, name):
                raise NotReadable(refused)
            notes.append(f"{name} read as the decode's RGB output (it is PIL's convert(\"RGB\") on images of every mode: "
                         f"{', '.join(PROBE_MODES)})")
            continue
        if name.startswith("Random"):
            raise NotReadable(f"{name} is random (a training augmentation): give the evaluation transforms")
        if _kind(t, IGNORED):
            continue
        if _kind(t, ("Resize",)):
            if resize is not None or crop is not None:
                raise NotReadable(f"{name} after {'a Resize' if resize else 'the CenterCrop'}: the spec resizes once, "
                                  "before its center crop")
            if getattr(t, "max_size", None):
                raise NotReadable(f"{name}(max_size={t.max_size}): a bound on the longer side holds no spec operation")
            size = _side(t.size)
            interpolation = _interpolation(t.interpolation, name)
            version2 = type(t).__module__.startswith("torchvision.transforms.v2")
            resize = {**resize_mode.scale(size), **resize_filter.of_torchvision(t, interpolation, where, version2),
                      "dtype": "float32" if where == "float" else "uint8",
                      **({"size_rounding": "floor"} if len(size) == 1 else {})}
            recipe = "torchvision" if where == "pil" else "torch"
        elif _kind(t, ("CenterCrop",)):
            if crop is not None:
                raise NotReadable(f"a second {name}: the spec crops once")
            if resize is None:
                raise NotReadable(f"{name} before any Resize: the spec resizes first, then crops")
            size = _side(t.size)
            crop = center_crop.table(size * 2 if len(size) == 1 else size, "half_even")
        elif kind := _kind(t, TO_FLOAT_SCALED):
            if where != "pil":
                raise NotReadable(f"{kind} on a tensor: expected a PIL image there")
            where, scale = "float", 1.0
        elif _kind(t, TO_UINT8_TENSOR):
            if where == "pil":
                where = "uint8"
        elif _kind(t, ("ConvertImageDtype", "ToDtype")):
            dtype = getattr(t, "dtype", None)
            if isinstance(dtype, dict) or "float" not in str(dtype):
                raise NotReadable(f"{name}({dtype}): only a conversion to a float type is read")
            if where == "uint8":
                scale = 1.0 if _kind(t, ("ConvertImageDtype",)) or getattr(t, "scale", False) else 255.0
                where = "float"
        elif _kind(t, ("Normalize",)):
            if where != "float":
                raise NotReadable(f"{name} on a {'PIL image' if where == 'pil' else 'uint8 tensor'}: torchvision "
                                  "normalizes float tensors")
            if normalize is not None:
                raise NotReadable(f"a second {name}: the spec normalizes once")
            normalize = {"mean": [float(m) for m in t.mean], "std": [float(s) for s in t.std]}
        else:
            raise NotReadable(f"{name}: no spec operation holds it (read: Resize, CenterCrop, ToTensor, PILToTensor, "
                              "ToImage, ConvertImageDtype, ToDtype, Normalize, and a function that is PIL's convert(\"RGB\"))")
    if resize is None:
        raise NotReadable("no Resize: the spec resizes the decoded image before anything else")
    if crop is None:
        if resize["mode"] == "shorter_side":
            raise NotReadable("no CenterCrop after a shorter-side Resize: the model input's size would follow the image")
        crop = {"size": resize["size"]}
    return Read({**decode.AS_PIL_OPENS, "resize": resize, "crop": crop,
                 "normalize": {"pixel_range": scale, **(normalize or {"mean": [0.0] * 3, "std": [1.0] * 3})},
                 **input_order("RGB")}, recipe, tuple(notes))


def _read_preset(preset: Any) -> Read:
    """torchvision's ``ImageClassification`` on a PIL image: ``F.resize`` (PIL), ``F.center_crop``,
    ``pil_to_tensor``, ``convert_image_dtype`` (0-1), ``normalize``."""
    size = _side(preset.resize_size)
    crop = _side(preset.crop_size)
    resize = {**resize_mode.scale(size), **resize_filter.table(_interpolation(preset.interpolation, "ImageClassification")),
              **({"size_rounding": "floor"} if len(size) == 1 else {})}
    return Read({**decode.AS_PIL_OPENS, "resize": resize,
                 "crop": center_crop.table(crop * 2 if len(crop) == 1 else crop, "half_even"),
                 "normalize": {"pixel_range": 1.0, "mean": list(map(float, preset.mean)), "std": list(map(float, preset.std))},
                 **input_order("RGB")}, "torchvision")


# -- timm's pretrained_cfg ----------------------------------------------------------------------

TIMM_DEFAULTS = {"crop_pct": 0.875, "crop_mode": "center", "interpolation": "bilinear",
                 "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
"""What timm's ``resolve_data_config`` falls back to (DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN/STD)."""
TIMM_INTERPOLATIONS = {mode.lower(): interpolation for interpolation, mode in resize_filter.TORCHVISION.items()}
"""timm's names: torchvision's InterpolationMode values."""


def read_timm(cfg: Mapping[str, Any], where: str) -> Read:
    """A ``pretrained_cfg`` as timm's evaluation transforms apply it (``transforms_imagenet_eval``):
    ``center``: the shorter side to ``floor(size / crop_pct)``, a center crop of ``size``;
    ``squash``: both sides to ``floor(side / crop_pct)``, then the crop; PIL resize, ``ToTensor``,
    ``Normalize``. ``input_size`` and ``crop_pct`` are the evaluation's (``test_input_size`` and
    ``test_crop_pct`` are only used when asked)."""
    cfg = {**TIMM_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    if "input_size" not in cfg:
        raise NotReadable(f"{where}: no input_size in the pretrained_cfg")
    size = cfg["input_size"]
    if not isinstance(size, (list, tuple)) or len(size) != 3:
        raise SpecError(f"{where}: input_size must be [channels, height, width], got {size!r}")
    channels, height, width = (_whole(where, f"input_size[{k}]", v) for k, v in enumerate(size))
    if channels != 3:
        raise NotReadable(f"{where}: input_size {list(cfg['input_size'])}: only 3-channel inputs are read")
    interpolation = str(cfg["interpolation"])
    if interpolation not in TIMM_INTERPOLATIONS:
        raise NotReadable(f"{where}: interpolation {interpolation!r}: no spec interpolation holds it (timm's "
                          f"{', '.join(TIMM_INTERPOLATIONS)} are read)")
    crop_pct, mode = _number(where, "crop_pct", cfg["crop_pct"], MIN_CROP_PCT, 1.0), str(cfg["crop_mode"])
    scale = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    resize = resize_filter.table(TIMM_INTERPOLATIONS[interpolation])
    if mode == "squash":
        resize.update(resize_mode.stretch(scale))
    elif mode == "center":
        if height != width:
            raise NotReadable(f"{where}: crop_mode center with a non-square input_size {[height, width]}: timm's "
                              "ResizeKeepRatio holds no spec operation")
        resize.update(_shortest_edge(scale[0]))
    else:
        what = "ResizeKeepRatio and CenterCropOrPad (padding)" if mode == "border" else "mode"
        raise NotReadable(f"{where}: crop_mode {mode!r}: timm's {what} holds no spec operation (center and squash are read)")
    return Read({**decode.AS_PIL_OPENS, "resize": resize,
                 "crop": center_crop.table([height, width], "half_even"),
                 "normalize": {"pixel_range": 1.0, "mean": _numbers(where, "mean", cfg["mean"]),
                               "std": _numbers(where, "std", cfg["std"])},
                 **input_order("RGB")}, "torchvision")


# -- Hugging Face's preprocessor_config.json ----------------------------------------------------

HF_BASE = {"do_resize": True, "resample": 2, "do_center_crop": False, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "do_convert_rgb": True, "do_pad": False,
           "rescale_offset": False, "include_top": False}
_SQUARE = {"default_to_square": True}
_SHORTEST = {"default_to_square": False}
_HALF = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}
_IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
_CLIP = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
_CROP_224 = {"crop_size": {"height": 224, "width": 224}}
HF_PROCESSORS = {
    # The class defaults of transformers 5.23's processors whose steps are the backends' resize, center
    # crop, rescale and normalize, or a resize of their own the spec holds (HF_RESIZES), read from their
    # classes (tests/reference/test_readers_proven.py holds this table to them). A key a class does not
    # use (size_divisor in a ViT config, do_reduce_labels) changes nothing of an image it processes.
    "ViTImageProcessor": {**_SQUARE, **_HALF, "size": {"height": 224, "width": 224}, "resample": 2},
    "DeiTImageProcessor": {**_SQUARE, **_HALF, **_CROP_224, "size": {"height": 256, "width": 256}, "resample": 3,
                           "do_center_crop": True},
    "BeitImageProcessor": {**_SQUARE, **_HALF, **_CROP_224, "size": {"height": 224, "width": 224}, "resample": 3},
    "CLIPImageProcessor": {**_SHORTEST, **_CLIP, **_CROP_224, "size": {"shortest_edge": 224}, "resample": 3,
                           "do_center_crop": True},
    "BitImageProcessor": {**_SHORTEST, **_CLIP, **_CROP_224, "size": {"shortest_edge": 224}, "resample": 3,
                          "do_center_crop": True},
    "SiglipImageProcessor": {**_SHORTEST, **_HALF, "size": {"height": 224, "width": 224}, "resample": 3},
    "EfficientNetImageProcessor": {**_SQUARE, **_HALF, "size": {"height": 346, "width": 346}, "resample": 3,
                                   "crop_size": {"height": 289, "width": 289}, "include_top": True},
    "MobileNetV1ImageProcessor": {**_SHORTEST, **_HALF, **_CROP_224, "size": {"shortest_edge": 256}, "resample": 2,
                                  "do_center_crop": True},
    "MobileNetV2ImageProcessor": {**_SHORTEST, **_HALF, **_CROP_224, "size": {"shortest_edge": 256}, "resample": 2,
                                  "do_center_crop": True},
    "ConvNextImageProcessor": {**_SHORTEST, **_HALF, "size": {"shortest_edge": 384}, "resample": 3,
                               "crop_pct": 224 / 256},
    "LevitImageProcessor": {**_SHORTEST, **_IMAGENET, **_CROP_224, "size": {"shortest_edge": 224}, "resample": 3,
                            "do_center_crop": True},
    "PoolFormerImageProcessor": {**_SHORTEST, **_IMAGENET, **_CROP_224, "size": {"shortest_edge": 224}, "resample": 3,
                                 "do_center_crop": True, "crop_pct": 0.9},
}
HF_RESAMPLE = {resize_filter.PIL_CODES[resize_filter.PIL[i]]: i for i in resize_filter.TORCHVISION}
"""PIL's resampling codes in ``resample`` -> the spec's interpolation (4 box and 5 hamming have none)."""


def processor_class(config: Mapping[str, Any]) -> str:
    """The processor class a config names (``image_processor_type``; an old ``feature_extractor_type``
    as its processor), without a backend suffix (``...Fast``, ``...Pil``)."""
    name = str(config.get("image_processor_type") or str(config.get("feature_extractor_type") or "").replace(
        "FeatureExtractor", "ImageProcessor"))
    for suffix in ("Fast", "Pil"):
        name = name.removesuffix(suffix)
    return name


def _hf_size(size: Any, square: bool, key: str, where: str) -> dict:
    """A ``size`` as transformers reads it (``get_size_dict``): an int is a square or the shortest edge;
    each side a whole number (:class:`SpecError` otherwise)."""
    if isinstance(size, int) and not isinstance(size, bool):
        size = {"height": size, "width": size} if square else {"shortest_edge": size}
    elif isinstance(size, (list, tuple)) and len(size) == 2:
        size = {"height": size[0], "width": size[1]}
    elif not isinstance(size, Mapping):
        raise NotReadable(f"{key} {size!r}: not a size")
    return {side: _whole(where, f"{key}.{side}", value) for side, value in size.items()}


def _shortest_edge(edge: int) -> dict:
    """The ``[resize]`` keys of the frameworks' shortest-edge resize: the shorter side to ``edge``, the
    other floored (``int()``, as transformers and timm compute it)."""
    return {**resize_mode.scale([edge]), "size_rounding": "floor"}


def _plain_resize(size: dict, c: Mapping[str, Any], where: str) -> tuple[dict, list[int] | None]:
    """The backends' own resize: the shortest edge to ``shortest_edge``, or a warp to ``height`` x ``width``."""
    if set(size) == {"shortest_edge"}:
        return _shortest_edge(size["shortest_edge"]), None
    if set(size) == {"height", "width"}:
        return resize_mode.stretch([int(size["height"]), int(size["width"])]), None
    raise NotReadable(f"{where}: size {size}: {', '.join(sorted(set(size) - {'height', 'width', 'shortest_edge'}))} "
                      "bounds a side the spec's resize does not (it has shortest_edge, or height and width)")


def _convnext_resize(size: dict, c: Mapping[str, Any], where: str) -> tuple[dict, list[int] | None]:
    """ConvNext's (and ResNet's): below 384 the shortest edge to ``int(edge / crop_pct)`` and a center
    crop of ``edge``; from 384 a square warp."""
    edge = size.get("shortest_edge")
    if edge is None:
        raise NotReadable(f"{where}: ConvNext's size needs shortest_edge, got {size}")
    if edge < 384:
        if c.get("crop_pct") is None:
            raise NotReadable(f"{where}: ConvNext's shortest_edge {edge} (below 384) needs a crop_pct, got none")
        crop_pct = _number(where, "crop_pct", c["crop_pct"], MIN_CROP_PCT, 1.0)
        return _shortest_edge(int(edge / crop_pct)), [edge, edge]
    return resize_mode.stretch([edge, edge]), None


def _levit_resize(size: dict, c: Mapping[str, Any], where: str) -> tuple[dict, list[int] | None]:
    """LeViT's: the shortest edge to ``int((256 / 224) * shortest_edge)``; height and width as they are."""
    if set(size) == {"shortest_edge"}:
        return _shortest_edge(int((256 / 224) * size["shortest_edge"])), None
    return _plain_resize(size, c, where)


def _poolformer_resize(size: dict, c: Mapping[str, Any], where: str) -> tuple[dict, list[int] | None]:
    """PoolFormer's: with a ``crop_pct``, the shortest edge (or a square's side) to ``int(side / crop_pct)``,
    a non-square size's sides each so (a warp)."""
    if c.get("crop_pct") is None:
        return _plain_resize(size, c, where)
    crop_pct = _number(where, "crop_pct", c["crop_pct"], MIN_CROP_PCT, 1.0)
    if set(size) == {"height", "width"} and size["height"] != size["width"]:
        return resize_mode.stretch([int(size["height"] / crop_pct), int(size["width"] / crop_pct)]), None
    edge = size.get("shortest_edge") or size.get("height")
    if edge is None or set(size) - {"shortest_edge", "height", "width"}:
        return _plain_resize(size, c, where)  # refused there, naming the key
    return _shortest_edge(int(edge / crop_pct)), None


HF_RESIZES = {"ConvNextImageProcessor": _convnext_resize, "LevitImageProcessor": _levit_resize,
              "PoolFormerImageProcessor": _poolformer_resize}
"""The classes whose resize is their own code (size -> the spec's resize, and the crop it makes itself)."""


def _hf_normalize(c: Mapping[str, Any], where: str) -> dict:
    """``rescale`` (``x * rescale_factor``, less 1 with EfficientNet's ``rescale_offset``), ``normalize``
    (``(x - mean) / std``) and EfficientNet's ``include_top`` (divided by ``std`` once more) as the spec's
    ``(x / 255 * pixel_range - mean) / std``; each number checked, naming its key."""
    offset = 1.0 if c["do_rescale"] and c["rescale_offset"] else 0.0
    means = _numbers(where, "image_mean", c["image_mean"]) if c["do_normalize"] else [0.0] * 3
    stds = _numbers(where, "image_std", c["image_std"]) if c["do_normalize"] or c["include_top"] else [1.0] * 3
    mean = [offset + m for m in means]
    std = [(s if c["do_normalize"] else 1.0) * (s if c["include_top"] else 1.0) for s in stds]
    rescale = _number(where, "rescale_factor", c["rescale_factor"], above=0.0) if c["do_rescale"] else None
    pixel_range = round(255.0 * rescale, 12) if rescale is not None else 255.0  # 1/255: 1, not 1 + 2e-16
    return {"pixel_range": pixel_range, "mean": mean, "std": std}


def read_hf(config: Mapping[str, Any], backend: str, where: str) -> Read:
    """A ``preprocessor_config.json`` on the ``backend`` (``torchvision``: uint8 tensors, torchvision v2's
    resize, the default of transformers 5; ``pil``: PIL's), with its processor class's defaults.
    A processor whose class overrides the steps (it crops, pads, flips channels, ... its own way) is
    refused by name: its preprocessing is its code, not these keys."""
    name = processor_class(config)
    if name not in HF_PROCESSORS:
        raise NotReadable(f"{where}: image_processor_type {name or '(none)'}: its steps are its own code, not read "
                          f"(read: {', '.join(HF_PROCESSORS)})")
    c = {**HF_BASE, **HF_PROCESSORS[name], **{k: v for k, v in config.items() if v is not None}}
    if "crop_pct" in config and config["crop_pct"] is None:
        c["crop_pct"] = None  # PoolFormer's resize without it: as the backends'
    if not c["do_resize"]:
        raise NotReadable(f"{where}: do_resize = false: the model input's size would follow the image")
    resample = _whole(where, "resample", c["resample"], minimum=0)
    if resample not in HF_RESAMPLE:
        raise NotReadable(f"{where}: resample {resample} ({ {4: 'BOX', 5: 'HAMMING'}.get(resample, '?') }): no spec "
                          f"interpolation holds it")
    if resample == resize_filter.PIL_CODES["NEAREST"] and backend == "torchvision":
        raise NotReadable(f"{where}: resample 0 (NEAREST) on the torchvision backend: transformers resizes with "
                          "torchvision's NEAREST_EXACT there, which no spec interpolation holds (the pil backend's "
                          "NEAREST is read: hf:PATH:pil)")
    size = _hf_size(c["size"], c.get("default_to_square", True), "size", where)
    resize, crop = HF_RESIZES.get(name, _plain_resize)(size, c, where)
    resize.update(resize_filter.table(HF_RESAMPLE[resample]))
    if crop is None and c.get("do_center_crop"):
        crop_size = _hf_size(c.get("crop_size") or size, True, "crop_size", where)
        if set(crop_size) != {"height", "width"}:
            raise NotReadable(f"{where}: crop_size {crop_size}: a center crop takes height and width")
        crop = [crop_size["height"], crop_size["width"]]
    if crop is None:
        if resize["mode"] == "shorter_side":
            raise NotReadable(f"{where}: a shortest_edge resize without do_center_crop: the model input's size would "
                              "follow the image")
        crop = list(resize["size"])
    if c.get("do_pad") and c.get("pad_size") is not None:
        pad = _hf_size(c["pad_size"], True, "pad_size", where)
        if [pad.get("height"), pad.get("width")] != crop:
            raise NotReadable(f"{where}: do_pad with pad_size {pad}: padding the {crop[0]}x{crop[1]} input at its bottom "
                              "and right holds no spec operation")
    # do_pad without a pad_size pads each image to the batch's largest: every image is already the input's size
    return Read({**decode.AS_PIL_OPENS, "resize": resize,
                 "crop": center_crop.table(crop, "floor"),
                 "normalize": _hf_normalize(c, where), **input_order("RGB")},
                "torch" if backend == "torchvision" else "torchvision")
