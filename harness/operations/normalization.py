"""The normalization (``[normalize]``): ``(pixel / 255 * pixel_range - mean) / std`` per channel,
the pixels first divided by the image's own maximum where ``divide_by = "max"`` (rembg).

Its kernels take the cropped image (HWC) and give the model input in RGB order, CHW float32
(the channel order's kernel then orders them: :mod:`harness.operations.channels`).
"""

from __future__ import annotations

import dataclasses

from harness.operations.base import Alternative, Key, Operation
from harness.operations.channels import rgb_values
from harness.stage import Stage

DIVISORS = ("range", "max")
PIXEL_RANGE = Key("normalize", "pixel_range", 255.0, doc="255 keeps raw pixel values; 1.0 is torchvision's ToTensor().")
MEAN = Key("normalize", "mean", (127.0, 127.0, 127.0), doc="Per channel, in the model's channel order.")
STD = Key("normalize", "std", (128.0, 128.0, 128.0), doc="Per channel, in the model's channel order.")
DIVISOR = Key("normalize", "divide_by", "range", DIVISORS,
              "``range``: pixels as they are; ``max``: first scaled by 255 over the image's own maximum.",
              omitted_at_default=True)


def by_maximum(p) -> bool:
    """Whether the pixels are first scaled so the image's maximum is 255 (rembg's ``im / np.max(im)``)."""
    return p.normalize.divide_by == "max"


def mean_std(p) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """mean and std on the 0-255 pixel scale, in RGB order (as every kernel normalizes)."""
    mean, std = p.normalize.mean_std_in_pixels()
    return rgb_values(mean, p.input), rgb_values(std, p.input)


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


SCALE, VALUES = "normalization scale", "normalization values"
"""Its culprits: the pixels' scale, and the mean/std written for one."""


def _alternatives(recipe, ref, deployed) -> list[Alternative]:
    n, culprit = ref.normalize, VALUES
    other_range = 1.0 if n.pixel_range == 255.0 else 255.0
    k = other_range / n.pixel_range
    out = [
        # The same mean/std numbers applied to pixels on the other scale (a missing or extra /255).
        Alternative(f"pixels scaled to 0-{other_range:g} (mean/std numbers unchanged)", SCALE,
                    {"normalize": {"pixel_range": other_range}}),
        # mean/std written for the other scale (0.485 vs 123.7) with pixels as they are.
        Alternative(f"mean/std on the 0-{other_range:g} scale", SCALE,
                    {"normalize": {"mean": [m * k for m in n.mean], "std": [s * k for s in n.std]}}),
        Alternative("ImageNet mean/std", culprit,
                    {"normalize": {"pixel_range": 1.0, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}),
        Alternative("(x - 127.5) / 127.5", culprit,
                    {"normalize": {"pixel_range": 255.0, "mean": [127.5] * 3, "std": [127.5] * 3}}),
        Alternative("std not applied", culprit, {"normalize": {"std": [n.pixel_range / 255.0] * 3}}),
        # Neither: the pixels only scaled to the spec's range (x / 255 into a model trained on normalized input).
        Alternative("mean/std not applied", culprit, {"normalize": {"mean": [0.0] * 3, "std": [1.0] * 3}}),
    ]
    other_divisor = "range" if by_maximum(ref) else "max"
    # rembg's im / np.max(im), or a plain / 255 where training divided by the image's maximum.
    out.append(Alternative("divided by the image's maximum" if other_divisor == "max"
                           else "divided by 255, not the image's maximum",
                           "normalization divisor", DIVISOR.table_of(other_divisor)))
    if deployed.normalize != n:
        out.append(Alternative("the deployed spec's normalization", culprit,
                               {"normalize": {k2: _plain(v) for k2, v in dataclasses.asdict(deployed.normalize).items()}}))
    return out


def _describe(p, recipe) -> str:
    mean, std = p.normalize.mean_std_in_pixels()
    return f"mean {[round(m, 3) for m in mean]} std {[round(v, 3) for v in std]} on the 0-255 scale"


OPERATION = Operation(
    "normalization", Stage.INPUT, (PIXEL_RANGE, MEAN, STD, DIVISOR),
    hint="mean/std scale (normalize.pixel_range, mean, std)", alternatives=_alternatives, describe=_describe,
    partners=((SCALE, VALUES),))  # the pixels' scale with the mean/std written for it


@OPERATION.kernel("opencv")
def _numpy(image, p):
    """HWC -> CHW float32 (a view: the caller makes it contiguous once)."""
    import numpy as np  # the backend's own library, imported where its kernel runs (the spec reads this module)

    x = image.astype(np.float32)
    if by_maximum(p) and (brightest := x.max()) > 0:  # rembg's im / np.max(im), in pixels
        x = x * np.float32(255.0 / brightest)
    mean, std = mean_std(p)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return x.transpose(2, 0, 1)


@OPERATION.kernel("torchvision")
@OPERATION.kernel("torch")
def _torch(tensor, p):
    """A float32 CHW tensor on the 0-255 scale -> normalized (torchvision's ToTensor, Normalize)."""
    from torchvision.transforms.functional import normalize  # the backend's own library

    if by_maximum(p) and (brightest := float(tensor.max())) > 0:
        tensor = tensor * (255.0 / brightest)  # rembg's im / np.max(im)
    mean, std = mean_std(p)
    return normalize(tensor / 255.0, [m / 255 for m in mean], [s / 255 for s in std])


@OPERATION.kernel("dali")
def _dali(image, p):
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs
    import nvidia.dali.math as dmath
    import nvidia.dali.types as types

    mean, std = mean_std(p)
    if by_maximum(p):  # the image's own maximum, computed in the graph per sample
        image = fn.cast(image, dtype=types.FLOAT)
        brightest = fn.reductions.max(image)
        image = image * (255.0 / dmath.max(brightest, 1e-30))  # (an all-black image stays black)
    return fn.crop_mirror_normalize(image, dtype=types.FLOAT, output_layout="CHW", mean=list(mean), std=list(std))
