"""Training definitions as users write them (the tests' own): a CLIP-style torchvision Compose
(bicubic shorter side 224, center crop, CLIP's mean and std: DALI #3994), a v2 Compose on uint8
tensors, a classic torchserve-style one (DALI #4257), one with a 256-pixel crop, and what no spec operation
holds."""

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.models import ResNet50_Weights
from torchvision.transforms import v2

CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)

clip = T.Compose([T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), T.ToTensor(),
                  T.Normalize(CLIP_MEAN, CLIP_STD)])
torchserve = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
tensors_v2 = v2.Compose([v2.ToImage(), v2.Resize(232, antialias=True), v2.CenterCrop(224),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
augmented = T.Compose([T.RandomResizedCrop(224), T.ToTensor()])
with_lambda = T.Compose([T.Resize(256), T.CenterCrop(224), T.Lambda(lambda x: x), T.ToTensor()])
normalized_pil = T.Compose([T.Resize(256), T.CenterCrop(224), T.Normalize((0.5,) * 3, (0.5,) * 3)])
bounded = T.Compose([T.Resize(224, max_size=300), T.CenterCrop(224), T.ToTensor()])
crop256 = T.Compose([T.Resize(292), T.CenterCrop(256), T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])

preset = ResNet50_Weights.IMAGENET1K_V2.transforms()


def annotated(image: Image.Image):
    """A function taking a PIL image, as its annotation says."""
    return preset(image)


def on_bytes(data):
    """A function given the file's bytes that passes them on to a preset (which takes a PIL image)."""
    return preset(data)


def _convert_image_to_rgb(image):
    """OpenAI CLIP's (clip/clip.py) and open_clip's ``_convert_to_rgb``, as written there."""
    return image.convert("RGB")


def _rgb_on_white(image):
    """An RGB conversion that composites transparent pixels on white (not what a decoder does)."""
    if image.mode in ("RGBA", "LA", "PA"):
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, image.convert("RGBA")).convert("RGB")
    return image.convert("RGB")


# OpenAI CLIP's _transform(224): BICUBIC is PIL's Image.BICUBIC there, which torchvision reads as the same mode
openai_clip = T.Compose([T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), _convert_image_to_rgb,
                         T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
clip_lambda = T.Compose([T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224),
                         T.Lambda(lambda image: image.convert("RGB")), T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
clip_on_white = T.Compose([T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), _rgb_on_white,
                           T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
