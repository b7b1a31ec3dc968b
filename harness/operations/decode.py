"""The decode (``[decode]``): file bytes -> HWC uint8 RGB, with the decoder's switches (EXIF
orientation, libjpeg's chroma upsampling and IDCT, DALI's share for the hardware JPEG engine).

Its kernels: ``opencv`` (``cv2.imdecode``, the ``preprocess_opencv`` model: libjpeg's defaults
only), ``torchvision`` (PIL, as ``ImageFolder`` opens a file), ``dali`` (nvImageCodec, CPU or
GPU: :func:`with_dali`); and the reference's decoder of the switches (:func:`with_libjpeg`:
libjpeg-turbo through simplejpeg), which the reference recipes decode with where a spec sets
one, so training that decoded otherwise is replayed and diagnose can try it. The kernels decode
only: the steps that call them check the file first (:mod:`harness.preprocessing.image_check`,
a layer above) and say in one line why a file does not decode.
"""

from __future__ import annotations

from harness.operations.base import Alternative, Key, Operation
from harness.stage import Stage

EXIF_ORIENTATION = Key("decode", "exif_orientation", True,
                       doc="Rotate the image as its EXIF orientation tag says (cv2 and DALI do by default, PIL not).")
FANCY_UPSAMPLING = Key("decode", "fancy_upsampling", True,
                       doc="Smooth chroma upsampling like libjpeg; DALI's GPU decoder needs it set explicitly.")
FAST_IDCT = Key("decode", "fast_idct", False, doc="libjpeg's fast, less accurate integer IDCT (DALI ``use_fast_idct``).")
HW_DECODER_LOAD = Key("decode", "hw_decoder_load", None,
                      doc="The share of each batch DALI's GPU decoder hands to the hardware JPEG engine, 0 to 1; "
                          "None: DALI's default.")

AS_PIL_OPENS = EXIF_ORIENTATION.table_of(False)
"""The ``[decode]`` table of an image as PIL opens it (no EXIF rotation): torchvision's
``ImageFolder`` and the ``datasets`` library give it so to a transform."""


def libjpeg_switches(spec) -> bool:
    """Whether ``spec`` (the spec's ``DecodeSpec``) sets a libjpeg switch off its default (only
    libjpeg-turbo itself, and DALI's GPU decoder, honour one)."""
    return spec.fancy_upsampling != FANCY_UPSAMPLING.default or spec.fast_idct != FAST_IDCT.default


def _cv2_refusal(p) -> str | None:
    if libjpeg_switches(p.decode):
        return (f"cv2.imdecode always uses fancy upsampling and the accurate IDCT; set {FANCY_UPSAMPLING.path} = true "
                f"and {FAST_IDCT.path} = false")
    return None


def cpu_refusal(p) -> str | None:
    """Why DALI's CPU decoder cannot decode as ``p`` says (its GPU decoder can)."""
    if not p.decode.fancy_upsampling:
        return (f"DALI's CPU decoder always upsamples chroma like libjpeg: {FANCY_UPSAMPLING.path} = false takes "
                "effect only on the GPU (mixed) decoder, which this machine cannot run")
    return None


def _alternatives(recipe, ref, deployed) -> list[Alternative]:
    d = ref.decode
    return [
        Alternative(f"fancy upsampling {'off' if d.fancy_upsampling else 'on'}", "JPEG chroma upsampling",
                    FANCY_UPSAMPLING.table_of(not d.fancy_upsampling)),
        Alternative(f"{'accurate' if d.fast_idct else 'fast'} IDCT", "JPEG IDCT", FAST_IDCT.table_of(not d.fast_idct)),
        Alternative(f"EXIF orientation {'ignored' if d.exif_orientation else 'applied'}", "EXIF orientation",
                    EXIF_ORIENTATION.table_of(not d.exif_orientation)),
    ]


def describe(p, recipe: str = "") -> str:
    return "decode" + ("" if p.decode.exif_orientation else ", EXIF orientation ignored (as PIL opens it)")


OPERATION = Operation(
    "decode", Stage.DECODE, (EXIF_ORIENTATION, FANCY_UPSAMPLING, FAST_IDCT, HW_DECODER_LOAD),
    hint=(f"chroma upsampling ({FANCY_UPSAMPLING.path}), IDCT ({FAST_IDCT.path}), EXIF orientation "
          f"({EXIF_ORIENTATION.path}), or a different decoder library"),
    alternatives=_alternatives, describe=describe,
    invalid=lambda p: (f"{HW_DECODER_LOAD.path} = {p.decode.hw_decoder_load!r}; expected a number from 0 to 1 (or no "
                       "key: DALI's default)") if not _valid_load(p.decode.hw_decoder_load) else None)


def _valid_load(load) -> bool:
    return load is None or (isinstance(load, float) and 0.0 <= load <= 1.0)


def with_cv2(buffer, spec):
    """The OpenCV kernel: a file's bytes (a 1-D uint8 array) -> HWC uint8 RGB by ``cv2.imdecode``
    (BGR, turned); None where OpenCV cannot decode them (the step says why, :mod:`harness.preprocessing.opencv`)."""
    import cv2  # the backend's own library, imported where its kernel runs (the spec reads this module)

    flags = cv2.IMREAD_COLOR if spec.exif_orientation else cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
    bgr = cv2.imdecode(buffer, flags)
    return None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def with_pil(data: bytes, upright: bool):
    """The PIL kernel: a file's bytes -> a PIL RGB image, upright if ``upright`` (PIL itself
    ignores EXIF, as torchvision's ``ImageFolder`` does); PIL's own errors for a corrupt file."""
    import io

    from PIL import Image, ImageOps  # the backend's own library, imported where its kernel runs

    image = Image.open(io.BytesIO(bytes(data)))
    if upright:
        image = ImageOps.exif_transpose(image)
    return image.convert("RGB")


def with_libjpeg(data: bytes, spec):
    """The reference's kernel of the switches: a JPEG's bytes -> HWC uint8 RGB by libjpeg-turbo
    (simplejpeg) with ``fastupsample`` and ``fastdct`` as the spec says, upright as its EXIF
    orientation says where the spec applies it; ValueError for a corrupt JPEG."""
    import numpy as np
    import simplejpeg

    rgb = simplejpeg.decode_jpeg(bytes(data), colorspace="RGB", fastdct=spec.fast_idct,
                                 fastupsample=not spec.fancy_upsampling)
    return np.ascontiguousarray(turned_upright(rgb, orientation(data))) if spec.exif_orientation else rgb


def orientation(data: bytes) -> int:
    """A file's EXIF orientation tag (1, upright, where it has none or a broken one)."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as image:
            return int(image.getexif().get(0x0112, 1))
    except Exception:  # no or broken EXIF: upright
        return 1


def turned_upright(rgb, tag: int):
    """An HWC array shown as EXIF orientation ``tag`` says it stands upright."""
    import numpy as np

    return {2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1],
            5: lambda a: a.transpose(1, 0, 2), 6: lambda a: np.rot90(a, k=-1),
            7: lambda a: np.rot90(a, k=-1)[:, ::-1], 8: lambda a: np.rot90(a, k=1)}.get(tag, lambda a: a)(rgb)


def with_dali(encoded, spec, device: str):
    """File bytes -> HWC uint8 RGB, on the CPU (``device="cpu"``) or with nvJPEG (``"mixed"``).

    ``fn.experimental.decoders.image`` (nvImageCodec), not ``fn.decoders.image``: in the DALI
    of the production release (deploy/versions.toml) the latter is the legacy decoder, which
    has no ``adjust_orientation`` and ignores EXIF orientation.
    """
    import nvidia.dali.fn as fn  # the backend's own library, imported where its kernel runs
    import nvidia.dali.types as types

    # hw_decoder_load only when the spec sets it: otherwise DALI's default, and the serialized
    # pipeline names no argument the spec did not
    hardware = {} if spec.hw_decoder_load is None else {HW_DECODER_LOAD.name: spec.hw_decoder_load}
    return fn.experimental.decoders.image(
        encoded,
        device=device,
        output_type=types.RGB,
        adjust_orientation=spec.exif_orientation,
        jpeg_fancy_upsampling=spec.fancy_upsampling,
        use_fast_idct=spec.fast_idct,
        **hardware,
    )


@OPERATION.kernel("opencv", refuses=_cv2_refusal)
def _opencv(buffer, p):
    return with_cv2(buffer, p.decode)


@OPERATION.kernel("torchvision")
@OPERATION.kernel("torch")
def _pil(data, p):
    return with_pil(data, p.decode.exif_orientation)


@OPERATION.kernel("dali")
def _dali(encoded, p, device: str = "cpu"):
    return with_dali(encoded, p.decode, device)
