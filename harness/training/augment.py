"""Training augmentations, applied after the deployed stages, on model-input tensors.

The loader's tensors are already normalized as the model takes them. Photometric
transforms (torchvision's ``ColorJitter``) expect RGB on the 0-1 scale, so the default
recipe brackets them with :class:`ToPixels` / :class:`FromPixels`, which undo and redo
the spec's normalization and channel order exactly. Any torchvision ``Compose`` (v1 or
v2) of tensor transforms can be given instead.
"""

from __future__ import annotations

import torch

from harness.manifest import load_dalis_nvjpeg
from harness.operations import channels, resize_filter
from harness.spec import Preprocess


def _mean_std(p: Preprocess) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = p.normalize.mean_std_in_pixels()
    return torch.tensor(mean, dtype=torch.float32).view(3, 1, 1), torch.tensor(std, dtype=torch.float32).view(3, 1, 1)


class ToPixels(torch.nn.Module):
    """Model input (CHW, normalized, model channel order) -> RGB on the 0-1 scale."""

    def __init__(self, p: Preprocess):
        super().__init__()
        self.mean, self.std = _mean_std(p)
        self.bgr = channels.is_bgr(p.input)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pixels = x * self.std.to(x.device) + self.mean.to(x.device)
        return (pixels.flip(-3) if self.bgr else pixels) / 255.0


class FromPixels(torch.nn.Module):
    """RGB on the 0-1 scale -> the model input again (inverse of :class:`ToPixels`)."""

    def __init__(self, p: Preprocess):
        super().__init__()
        self.mean, self.std = _mean_std(p)
        self.bgr = channels.is_bgr(p.input)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pixels = x * 255.0
        pixels = pixels.flip(-3) if self.bgr else pixels
        return (pixels - self.mean.to(x.device)) / self.std.to(x.device)


def default_augmentations(p: Preprocess, crop_scale: tuple[float, float] = (0.6, 1.0), jitter: float = 0.2):
    """Random resized crop (``crop_scale`` of the area, back to the spec's crop size),
    horizontal flip, and brightness/contrast/saturation jitter of ``jitter``, as a
    torchvision v2 ``Compose`` on model-input tensors."""
    load_dalis_nvjpeg()  # before torchvision, whose nvJPEG would otherwise be DALI's
    from torchvision.transforms import v2

    return v2.Compose([
        ToPixels(p),
        v2.RandomResizedCrop(list(p.crop.size), scale=crop_scale,
                             **resize_filter.torchvision_arguments(resize_filter.TORCHVISION_DEFAULT)),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(brightness=jitter, contrast=jitter, saturation=jitter),
        FromPixels(p),
    ])
