"""The user's own training preprocessing: a torchvision ``Compose``, or any callable.

Given as ``path/to/file.py:name``. For a ``Compose``, the image is opened the way
torchvision's ``ImageFolder`` opens it (PIL, ``convert("RGB")``, no EXIF rotation) and
each transform's output is captured as a stage: ``Resize`` -> ``resize``, ``CenterCrop``
-> ``crop``, the final output -> ``input``. A callable that takes a PIL image (a torchvision
transform or preset such as ``ResNet50_Weights.DEFAULT.transforms()``, a v2 transform, a
function whose first parameter is annotated ``PIL.Image.Image``, a Hugging Face image
processor) is given the image opened the same way; any other callable takes the file bytes.
Either returns the model input (CHW) or a dict of some of the stages, ``input`` included.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from harness.errors import call_user, raised
from harness.manifest import load_dalis_nvjpeg
from harness.preprocessing import PREPROCESS_STAGES
from harness.preprocessing.image_check import ImageError, identify
from harness.reference.base import Recipe
from harness.reference.decoders import open_rgb
from harness.spec import SpecError

# Which stage a transform's output is, by class name (torchvision v1 and v2 share names).
STAGE_OF_TRANSFORM = {"Resize": "resize", "CenterCrop": "crop", "RandomResizedCrop": "crop", "Crop": "crop"}
# Transforms after which float tensors hold values on the 0-1 scale.
SCALING_TRANSFORMS = {"ToTensor", "ConvertImageDtype"}


def load_object(ref: str) -> Any:
    """``path/to/file.py:name`` -> the object ``name`` defined in that file (a
    :class:`~harness.spec.SpecError` names what is wrong)."""
    from harness.user_code import UserCodeError
    from harness.user_code import load_object as load

    load_dalis_nvjpeg()  # before the user's code imports torchvision, whose nvJPEG would otherwise be DALI's
    try:
        return load(ref)
    except UserCodeError as exc:
        raise SpecError(str(exc)) from None


def is_compose(obj: Any) -> bool:
    return type(obj).__name__ == "Compose" and hasattr(obj, "transforms")


PIL_TAKERS = ("torchvision.transforms", "timm.data", "transformers.")
"""Where the callables given a PIL image come from: torchvision's transforms and presets (v1
and v2), timm's, Hugging Face's image processors."""


def takes_pil_image(obj: Any) -> bool:
    """Whether ``obj`` is called with a PIL image rather than the file's bytes: a transform or
    image processor of :data:`PIL_TAKERS` (by its class or a base class), or a function whose
    first parameter is annotated ``PIL.Image.Image``."""
    import inspect

    if any(c.__module__.startswith(PIL_TAKERS) for c in type(obj).__mro__ if c is not object):
        return True
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters:
        return False
    annotation = parameters[0].annotation
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        return annotation in ("Image.Image", "PIL.Image.Image")
    from PIL import Image

    return annotation is Image.Image


GIVEN_BYTES = ("a reference callable is given the file's bytes, unless it takes a PIL image (a torchvision "
               "transform or preset, a timm or Hugging Face one, or a function whose first parameter is annotated "
               "PIL.Image.Image), which gets the image as torchvision's ImageFolder opens it; it returns the model "
               "input (CHW) or a dict of stages with 'input'")
"""What a reference callable may take and return: said whenever one fails."""


def to_hwc_255(value: Any, scaled: bool) -> np.ndarray:
    """A PIL image or CHW tensor -> HWC numpy on the 0-255 scale (the stage convention)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        array = value.detach().cpu().permute(1, 2, 0).numpy()
        return array.astype(np.float32) * 255.0 if scaled and array.dtype.kind == "f" else array
    return np.asarray(value)


def as_input(value: Any, where: str) -> np.ndarray:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    array = np.asarray(value, dtype=np.float32)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3:
        raise SpecError(f"{where} must produce a CHW model input, got shape {list(array.shape)}")
    return np.ascontiguousarray(array)


class ComposeRecipe(Recipe):
    """A torchvision ``Compose`` with each transform's output captured as a stage."""

    def __init__(self, compose: Any, name: str = "compose"):
        self.compose = compose
        self.name = name
        captured = [STAGE_OF_TRANSFORM[type(t).__name__] for t in compose.transforms if type(t).__name__ in STAGE_OF_TRANSFORM]
        self.stages = tuple(s for s in PREPROCESS_STAGES if s in {"decode", "input", *captured})

    def __call__(self, data: bytes) -> dict[str, np.ndarray]:
        image = open_rgb(data, upright=False)  # as ImageFolder's loader opens it
        out = {"decode": np.asarray(image)}
        scaled = False
        value: Any = image
        for transform in self.compose.transforms:
            value = call_user(transform, value)  # a user's own transform may sys.exit(): this image's row
            kind_name = type(transform).__name__
            scaled = scaled or kind_name in SCALING_TRANSFORMS or getattr(transform, "scale", False) is True
            stage = STAGE_OF_TRANSFORM.get(kind_name)
            if stage:
                out[stage] = to_hwc_255(value, scaled)
        out["input"] = as_input(value, f"reference {self.name}")
        return out

    def describe(self):
        return f"{self.name}: " + " -> ".join(type(t).__name__ for t in self.compose.transforms)


class CallableRecipe(Recipe):
    """Any ``fn(file_bytes)`` returning the model input, or a dict of stages; with ``pil``, the
    image opened as torchvision's ``ImageFolder`` opens it instead (:func:`takes_pil_image`)."""

    def __init__(self, fn: Callable[[Any], Any], name: str, pil: bool = False):
        self.fn, self.name, self.pil = fn, name, pil
        self.stages = ("input",)  # refined after the first call if fn returns a dict

    def __call__(self, data: bytes) -> dict[str, np.ndarray]:
        kind = identify(data)
        given = open_rgb(data, upright=False) if self.pil else bytes(data)
        what = f"a PIL image ({given.width}x{given.height} RGB)" if self.pil else "the file's bytes"
        try:
            result = call_user(self.fn, given)  # sys.exit() in it fails this image, not the run
        except Exception as exc:
            raise ImageError(f"reference {self.name} failed on this {kind}, given {what}: {raised(exc)} ({GIVEN_BYTES})") \
                from None
        if self.pil and not isinstance(result, dict):
            result = _pixel_values(result)
        if isinstance(result, dict):
            unknown = set(result) - set(PREPROCESS_STAGES)
            if unknown or "input" not in result:
                raise SpecError(f"reference {self.name} returned stages {sorted(result)}; "
                                f"expected some of {list(PREPROCESS_STAGES)}, with 'input'")
            out = {k: np.asarray(v) for k, v in result.items() if k != "input"}
            out["input"] = as_input(result["input"], f"reference {self.name}")
        else:
            out = {"input": as_input(result, f"reference {self.name}")}
        self.stages = tuple(s for s in PREPROCESS_STAGES if s in out)
        return out

    def describe(self):
        return f"{self.name}: user callable" + (" (given a PIL image)" if self.pil else "")


def _pixel_values(result: Any) -> Any:
    """A Hugging Face processor's answer (a ``BatchFeature`` holding ``pixel_values``) as its one image's tensor."""
    values = result.get("pixel_values") if hasattr(result, "get") and not isinstance(result, dict) else None
    if values is None:
        return result
    return values[0] if len(values) == 1 else values
