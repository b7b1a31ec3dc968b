"""The model input's channel order (``[input] channel_order``): RGB, or BGR as cv2 decodes.

Every backend normalizes in RGB (the order decoders give) with the mean and std turned to
RGB (:func:`rgb_values`), then this operation's kernel puts the channels in the model's order
(CHW). OCR's recognizer has a key of the same name in its ``[recognition]`` table and uses
this module's kernels on its own crops (:func:`reorder_hwc`, :func:`dali_hwc`).
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.operations.base import Alternative, Key, Operation
from harness.stage import Stage

ORDERS = ("RGB", "BGR")
KEY = Key("input", "channel_order", "RGB", ORDERS, "The model input's channel order.")


def order_of(owner: Any) -> str:
    """The channel order a table says (``p.input``, or OCR's recognition record)."""
    return owner.channel_order


def is_bgr(owner: Any) -> bool:
    return order_of(owner) == "BGR"


def rgb_values(values: Sequence[float], owner: Any) -> tuple[float, ...]:
    """Per-channel values given in the model's order (mean, std), in RGB order."""
    return tuple(values[::-1]) if is_bgr(owner) else tuple(values)


def table(order: str) -> dict[str, str]:
    """The table entry setting the order (``{"channel_order": order}``), for a table of its own."""
    return {KEY.name: order}


def section(order: str) -> dict[str, dict[str, str]]:
    """The spec's ``[input]`` table setting the order."""
    return KEY.table_of(order)


def reorder_hwc(image, order: str, owner: Any):
    """An HWC numpy image in channel ``order`` -> in ``owner``'s order."""
    return image[..., ::-1] if order != order_of(owner) else image


def dali_hwc(image, owner: Any):
    """A DALI HWC uint8 RGB node -> in ``owner``'s order."""
    if not is_bgr(owner):
        return image
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs
    import nvidia.dali.types as types

    return fn.color_space_conversion(image, image_type=types.RGB, output_type=types.BGR)


def _alternatives(recipe, ref, deployed) -> list[Alternative]:
    other = "BGR" if order_of(ref.input) == "RGB" else "RGB"
    out = [Alternative(f"channel order {other}", OPERATION.name, section(other))]
    if order_of(ref.input) == "RGB":
        # cv2.imdecode's BGR kept from the decoder on: the image stages too, not only the model input.
        out.append(Alternative("BGR from the decoder on", OPERATION.name, section("BGR"), bgr_images=True))
    return out


OPERATION = Operation(
    "channel order", Stage.INPUT, (KEY,), hint=f"channel order ({KEY.path})",
    alternatives=_alternatives, describe=lambda p, recipe: order_of(p.input))


@OPERATION.kernel("opencv")
def _numpy(chw, p):
    return chw[::-1] if is_bgr(p.input) else chw


@OPERATION.kernel("torchvision")
@OPERATION.kernel("torch")
def _torch(chw, p):
    return chw.flip(0) if is_bgr(p.input) else chw


@OPERATION.kernel("dali")
def _dali(chw, p):
    if not is_bgr(p.input):
        return chw
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs

    return fn.cat(chw[2:3], chw[1:2], chw[0:1], axis=0)
