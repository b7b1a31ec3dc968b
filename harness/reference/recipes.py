"""Built-in recipes, read from the spec's reference section: one class per library,
registered by :func:`~harness.reference.base.register` (its ``name`` in ``harness.spec.RECIPES``)."""

from __future__ import annotations

import functools
import threading

import numpy as np

from harness import operations
from harness.manifest import load_dalis_nvjpeg
from harness.operations import resize_filter, resize_mode
from harness.preprocessing import PREPROCESS_STAGES, opencv
from harness.reference.base import Recipe, register
from harness.reference.decoders import decode_with_switches, open_rgb
from harness.spec import Preprocess, SpecError, with_overrides
from harness.stage import Stage


@register
class OpenCVRecipe(Recipe):
    """cv2.imdecode, BGR->RGB, cv2.resize, center crop, normalize, CHW: the same code the
    ``preprocess_opencv`` model serves (:data:`harness.preprocessing.opencv.STEPS`)."""

    name = "opencv"
    trains = True

    def __init__(self, p: Preprocess):
        opencv.check_supported(p, decode=False)  # decode switches go to libjpeg-turbo directly
        self.p = p

    def steps(self):
        # The served table itself, so a stage added there is replayed here; only the decode
        # is the recipe's own (libjpeg-turbo when the spec sets decode switches).
        return {**{stage: functools.partial(step, p=self.p) for stage, step in opencv.STEPS.items()},
                Stage.DECODE: self.decode}

    def decode(self, data):
        custom = decode_with_switches(data, self.p.decode)
        return custom if custom is not None else opencv.decode(data, self.p.decode)

    @classmethod
    def model_inputs(cls, p):
        # Training feeds exactly what the preprocess_opencv model serves (no libjpeg switches).
        opencv.check_supported(p)
        return lambda data: opencv.run(data, p, (Stage.INPUT,))[Stage.INPUT]

    def describe(self):
        r = self.p.resize
        return f"opencv: cv2.imdecode, cv2.resize({r.extent()}, {r.interpolation}), {r.cropped}, normalize"


@register
class TorchvisionRecipe(Recipe):
    """The classic torchvision training pipeline on PIL images::

        Image.open(f).convert("RGB") -> Resize(size, interpolation) -> CenterCrop -> ToTensor -> Normalize

    Exactly as torchvision does it, rounding included: with ``auto`` rounding, ``Resize(256)``
    truncates the long side (int()) and ``CenterCrop`` rounds offsets half to even; an
    explicit ``half_up`` sizes and crops by the spec instead. PIL always filters when
    shrinking, so a resize filter without it (or ``dtype = "float32"``) resizes the image as a
    tensor instead, where torchvision honours it (:func:`harness.operations.resize_filter.on_tensor`).
    """

    name = "torchvision"
    force_tensor = False
    native_rounding = ("floor", "half_even")  # int() on the resized size, round() on the crop offsets
    trains = True

    def __init__(self, p: Preprocess):
        load_dalis_nvjpeg()  # before torchvision (its kernels import it), whose nvJPEG would otherwise be DALI's
        if (reason := operations.refusal(self.name, p)) is not None:
            raise SpecError(reason)
        self.p = p
        self.on_tensor = resize_filter.on_tensor(p, self.force_tensor)
        self._filter = resize_filter.OPERATION.kernels[self.name]
        # torchvision's Resize(size): the shorter side's length, or both sides
        self._size = p.resize.size[0] if p.resize.mode == "shorter_side" else [p.resize.size[0], p.resize.size[-1]]

    def decode(self, data):
        from PIL import Image

        custom = decode_with_switches(data, self.p.decode)
        if custom is not None:
            return Image.fromarray(custom)
        return open_rgb(data, upright=self.p.decode.exif_orientation)

    def resize(self, image):
        if self.p.resize.for_detector:
            return self._detector_resize(self._as_tensor(image) if self.on_tensor else image)
        if self.on_tensor:
            image = self._as_tensor(image)
        # the spec's own sizes where PIL's resampling runs on a tensor or sizes round half up; else torchvision's
        exact = (self.on_tensor and self.p.resize.resampling == "pil") or (
            self.p.resize.size_rounding == "half_up" and self.p.resize.mode == "shorter_side")
        return self._filter(image, self._size_of(image) if exact else self._size, self.p.resize)

    def _size_of(self, image) -> list[int]:
        """The output size torchvision is given: the spec's where it rounds half up, else
        torchvision's own (the shorter side's length: the other truncated)."""
        from torchvision.transforms import functional as F

        r = self.p.resize
        if r.mode == "shorter_side" and r.size_rounding != "half_up":
            return [r.size[0]]
        height, width = F.get_image_size(image)[::-1]
        return list(r.output_size(height, width))

    def _as_tensor(self, image):
        import torch
        from torchvision.transforms.functional import pil_to_tensor

        image = pil_to_tensor(image)
        return image.to(torch.float32) if self.p.resize.dtype == "float32" else image

    def _detector_resize(self, image):
        from torchvision.transforms import functional as F

        width, height = F.get_image_size(image)
        g = self.p.resize.geometry(height, width)
        if g.resized == (height, width):
            return image
        return self._filter(image, list(g.resized), self.p.resize)

    def crop(self, image):
        if self.p.resize.mode == "letterbox":
            from torchvision.transforms import functional as F

            width, height = F.get_image_size(image)
            top, bottom, left, right = resize_mode.letterbox_padding(height, width, self.p.resize.detector())
            return F.pad(image, [left, top, right, bottom], fill=self.p.resize.pad_value)
        return operations.apply(Stage.CROP, "torchvision", image, self.p)  # (torch's kernel is the same)

    def input(self, image):
        import torch
        from torchvision.transforms.functional import pil_to_tensor

        tensor = (pil_to_tensor(image) if not isinstance(image, torch.Tensor) else image).to(torch.float32)
        return operations.apply(Stage.INPUT, "torch", tensor, self.p).numpy()

    def to_array(self, image):
        import torch

        if isinstance(image, torch.Tensor):
            return image.permute(1, 2, 0).numpy()
        return np.asarray(image)

    def describe(self):
        r = self.p.resize
        path = "uint8 tensor" if self.on_tensor else "PIL"
        size = list(r.size) if not r.for_detector else r.extent()
        crop = {"letterbox": "Pad", "limit_side": "no crop"}.get(r.mode, "CenterCrop")
        return (f"torchvision: PIL decode, Resize({size}, {resize_filter.arguments(self.p)}) on {path}, "
                f"{crop}, ToTensor, Normalize")

    @classmethod
    def model_inputs(cls, p):
        # The common torchvision training recipe: PIL's resize, which always low-passes.
        return super().model_inputs(with_overrides(p, **resize_filter.ANTIALIAS.table_of(True)))


@register
class TorchRecipe(TorchvisionRecipe):
    """torchvision's transforms on uint8 tensors (``PILToTensor`` first): the resize is
    torch's own kernel (with the spec's filter), not PIL's."""

    name = "torch"
    force_tensor = True
    trains = False  # not offered for training (yet): torchvision's PIL recipe is the common one


@register
class DaliRecipe(Recipe):
    """Training that preprocessed with DALI on the CPU: the same graph as the deployed
    ``preprocess_dali`` (:mod:`harness.preprocessing.dali_graph`), with the reference's
    parameters. One pipeline per thread (DALI pipelines are not thread-safe)."""

    name = "dali"

    def __init__(self, p: Preprocess):
        from harness.preprocessing.dali_graph import CpuPipelineRunner, check_supported

        check_supported(p)
        self.p = p
        self._make = lambda: CpuPipelineRunner(p, max_batch_size=1, taps=True)
        self._make()  # fail now, not in a worker thread, if the spec is unsupported
        self._local = threading.local()

    def __call__(self, data):
        runner = getattr(self._local, "runner", None) or self._make()
        self._local.runner = runner
        result = runner.run([np.frombuffer(bytes(data), np.uint8)])[0]
        if result.error:
            raise result.error
        return dict(zip(PREPROCESS_STAGES, result.outputs))

    def describe(self):
        r = self.p.resize
        return (f"dali (CPU): decoders.image, resize({r.extent()}, {resize_filter.arguments(self.p)}), "
                f"{'crop' if r.cropped == 'center crop' else r.cropped}, normalize")
