"""Labeled detection data from real photos: known words rendered in several fonts onto them,
each with its exact box, written as COCO JSON; and which unlabeled photos hold text.

Rendering (:func:`render_words`): a word's ink is drawn on a mask, rotated by an exact
affine transform (``cv2.warpAffine``) and blended onto the photo, so its labels are exact:

- ``segmentation``: the quadrilateral of the word's unrotated ink rectangle, rotated (the
  ICDAR-style text label), corners clockwise from the top left;
- ``bbox``: the axis-aligned box of every pixel the rendered word touches (COCO ``[x, y, w,
  h]``, pixel corners: a word on column 10 alone spans x 10 to 11).

Deterministic: one seed picks the photos, words, fonts, sizes, angles, colours and places.
Fonts: matplotlib's bundled DejaVu and STIX families (matplotlib is pinned, so the same
files everywhere), plus any others given (Debian's ``fonts-dejavu`` and the like).

``python -m harness.detection.data generate PHOTOS OUT --count 20 --seed 0`` writes
``OUT/images/*.jpg`` and ``OUT/labels.json``; ``... find-text PHOTOS OUT.json`` lists the
photos in which the reference detector finds text (agreement without labels, and what to
leave out of the labeled set: text already in a photo has no label).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
import shapely
from PIL import Image, ImageDraw, ImageFont

from harness.detection.boxes import order_clockwise, polygons
from harness.operations import resize_mode
from harness.validation import COUNT, FRACTION, SEED

WORDS = (
    "EXIT", "OPEN", "Coffee", "harbour", "STOP", "river", "Station", "garden", "NORTH", "ticket", "Bakery", "window",
    "market", "SALE", "lantern", "Museum", "bridge", "PARKING", "orange", "Library", "forest", "HOTEL", "pocket",
    "Avenue", "summer", "ROUTE", "42", "2026", "Platform", "tea", "Welcome", "planet", "DANGER", "silver",
    "Kitchen", "meadow", "CAFE", "journey", "Pharmacy", "yellow", "SCHOOL", "copper", "Theatre", "anchor",
)
"""The vocabulary: single words of 2 to 8 characters, cases and digits mixed (one label per word, as
ICDAR labels words: a detector splits phrases at their spaces)."""

MATPLOTLIB_FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-BoldItalic.ttf",
                    "DejaVuSansMono.ttf", "STIXGeneral.ttf", "STIXGeneralBol.ttf")
CATEGORY = {"id": 1, "name": "text"}


def default_fonts() -> tuple[Path, ...]:
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    return tuple(folder / name for name in MATPLOTLIB_FONTS)


@dataclass(frozen=True)
class RenderSettings:
    words: tuple[int, int] = (2, 4)
    """Words per photo (inclusive range)."""
    height: tuple[float, float] = (0.06, 0.12)
    """Font size as a fraction of the photo's shorter side."""
    min_font_px: int = 16
    max_angle: float = 15.0
    """Degrees; half the words are level, the rest turned uniformly within +-max_angle."""
    fonts: tuple[Path, ...] = field(default_factory=default_fonts)
    vocabulary: tuple[str, ...] = WORDS
    quality: int = 95
    """JPEG quality of the written photos."""


@dataclass(frozen=True)
class Word:
    text: str
    font: str
    """The font file's name."""
    quad: np.ndarray
    """[4, 2] corners (x, y), clockwise from the top left."""
    bbox: tuple[float, float, float, float]
    """(x, y, w, h) of the pixels the word touches."""


def render_words(photo: np.ndarray, rng: random.Random,
                 settings: RenderSettings = RenderSettings()) -> tuple[np.ndarray, list[Word]]:
    """Words drawn onto a copy of an HWC uint8 RGB photo, none overlapping another, with their labels."""
    out = photo.astype(np.float32)
    height, width = photo.shape[:2]
    placed: list[Word] = []
    for _ in range(rng.randint(*settings.words)):
        for _attempt in range(30):  # a place where the word fits and overlaps no other
            word = _try_word(out, rng, settings, placed)
            if word is not None:
                placed.append(word)
                break
    return np.clip(np.round(out), 0, 255).astype(np.uint8), placed


def _try_word(canvas: np.ndarray, rng: random.Random, s: RenderSettings, placed: list[Word]) -> Word | None:
    height, width = canvas.shape[:2]
    text, font_path = rng.choice(s.vocabulary), rng.choice(s.fonts)
    size = max(s.min_font_px, int(rng.uniform(*s.height) * min(height, width)))
    font = ImageFont.truetype(str(font_path), size)
    stroke = max(1, size // rng.choice((12, 16, 24)))  # an outline of the other colour: legible on any background
    angle = 0.0 if rng.random() < 0.5 else rng.uniform(-s.max_angle, s.max_angle)
    ink, body = _word_masks(text, font, stroke)
    box = Image.fromarray(ink).getbbox()
    if box is None:
        return None
    left, top, right, bottom = box
    h, w = ink.shape
    # rotation about the mask's centre, onto a canvas big enough for the turned mask
    matrix = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), angle, 1.0)
    cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
    out_w, out_h = int(np.ceil(w * cos + h * sin)), int(np.ceil(w * sin + h * cos))
    matrix[:, 2] += ((out_w - 1) / 2 - (w - 1) / 2, (out_h - 1) / 2 - (h - 1) / 2)
    if out_w >= width or out_h >= height:
        return None
    x0, y0 = rng.randint(0, width - out_w), rng.randint(0, height - out_h)
    corners = np.array([[left, top], [right, top], [right, bottom], [left, bottom]], np.float64)
    # continuous corners -> pixel centres (-0.5), the affine map, back (+0.5), then placed
    quad = order_clockwise((corners - 0.5) @ matrix[:, :2].T + matrix[:, 2] + 0.5 + (x0, y0))
    poly = shapely.Polygon(quad)
    if any(poly.buffer(size * 0.3).intersects(shapely.Polygon(p.quad)) for p in placed):
        return None
    turned = [cv2.warpAffine(m, matrix, (out_w, out_h), flags=cv2.INTER_LINEAR) for m in (ink, body)]
    ys, xs = np.nonzero(turned[0])
    if not len(xs):
        return None
    region = canvas[y0:y0 + out_h, x0:x0 + out_w]
    fill, edge = _colours(region[turned[0] > 0], rng)
    for mask, colour in ((turned[0], edge), (turned[1], fill)):
        alpha = (mask.astype(np.float32) / 255.0)[..., None]
        region[:] = region * (1 - alpha) + np.asarray(colour, np.float32) * alpha
    bbox = (float(x0 + xs.min()), float(y0 + ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))
    return Word(text, Path(font_path).name, quad, bbox)


def _word_masks(text: str, font: ImageFont.FreeTypeFont, stroke: int) -> tuple[np.ndarray, np.ndarray]:
    """(ink with stroke, body without) masks of a word, with a margin all round."""
    left, top, right, bottom = font.getbbox(text, stroke_width=stroke)
    margin = 4 + stroke
    size = (right - left + 2 * margin, bottom - top + 2 * margin)
    masks = []
    for width in (stroke, 0):
        mask = Image.new("L", size, 0)
        ImageDraw.Draw(mask).text((margin - left, margin - top), text, font=font, fill=255, stroke_width=width, stroke_fill=255)
        masks.append(np.asarray(mask))
    return masks[0], masks[1]


def _colours(background: np.ndarray, rng: random.Random) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(fill, stroke) colours that stand out from the mean of the pixels under the word."""
    luminance = float(np.mean(background @ np.array([0.299, 0.587, 0.114]))) if len(background) else 128.0
    dark = tuple(rng.randint(0, 50) for _ in range(3))
    light = tuple(rng.randint(215, 255) for _ in range(3))
    return (dark, light) if luminance > 128 else (light, dark)


def generate(photos: Sequence[Path], out: Path, count: int, seed: int = 0,
             settings: RenderSettings = RenderSettings()) -> Path:
    """Render words onto ``count`` photos chosen by ``seed`` from ``photos`` (sorted first, so
    the order they are given in does not matter); writes ``out/images/NNNN_<photo>.jpg`` and
    ``out/labels.json`` (COCO), and returns the latter."""
    pool = sorted(set(Path(p) for p in photos))
    if count > len(pool):
        raise ValueError(f"{count} photos asked for, {len(pool)} given")
    rng = random.Random(seed)
    chosen = rng.sample(pool, count)
    (out / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for image_id, source in enumerate(chosen, start=1):
        photo = np.asarray(Image.open(source).convert("RGB"))
        drawn, words = render_words(photo, rng, settings)
        name = f"images/{image_id:04d}_{source.stem}.jpg"
        Image.fromarray(drawn).save(out / name, quality=settings.quality)
        images.append({"id": image_id, "file_name": name, "height": drawn.shape[0], "width": drawn.shape[1],
                       "source": source.name})
        for word in words:
            annotations.append({
                "id": len(annotations) + 1, "image_id": image_id, "category_id": CATEGORY["id"],
                "bbox": [round(v, 3) for v in word.bbox], "segmentation": [np.round(word.quad, 3).reshape(-1).tolist()],
                "area": round(float(shapely.Polygon(word.quad).area), 3), "iscrowd": 0, "text": word.text, "font": word.font})
    labels = {"info": {"description": "words rendered onto real photos by harness.detection.data", "seed": seed,
                       "photos": count},
              "images": images, "annotations": annotations, "categories": [CATEGORY]}
    path = out / "labels.json"
    path.write_text(json.dumps(labels, indent=1, allow_nan=False) + "\n")
    return path


def find_text(photos: Sequence[Path], detect: Callable[[np.ndarray], object], min_score: float = 0.6,
              page_fraction: float = 0.5, progress: Callable[[str], None] = lambda s: None) -> dict[str, dict]:
    """Photo name -> what ``detect`` found in it, for each photo with a box scoring at least
    ``min_score``: ``text`` boxes, and ``page`` boxes (covering more than ``page_fraction``
    of the photo: PP-OCRv6's detector marks whole photos of plain objects so, as rapidocr's
    own pipeline does before its recognizer drops them), and the best text score.
    ``detect``: an HWC BGR image -> an object with ``.detections`` (the
    :class:`~harness.detection.detector.TextDetector`). Unreadable photos are reported and skipped."""
    found = {}
    for i, path in enumerate(sorted(photos)):
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            progress(f"{path.name}: not an image OpenCV can read, skipped")
            continue
        d = detect(image).detections
        strong = d.select(d.scores >= min_score)
        page = shapely.area(polygons(strong.quads)) > page_fraction * image.shape[0] * image.shape[1]
        if len(strong):
            text_scores = strong.scores[~page]
            found[path.name] = {"text": int(len(text_scores)), "page": int(page.sum()),
                                "best_text_score": round(float(text_scores.max()), 4) if len(text_scores) else None}
        if (i + 1) % 50 == 0:
            progress(f"{i + 1}/{len(photos)} photos, {sum(f['text'] > 0 for f in found.values())} with text")
    return found


def _photo_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.detection.data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="render words onto photos; write images and COCO labels")
    gen.add_argument("photos", type=Path, help="folder of photos (searched recursively)")
    gen.add_argument("out", type=Path)
    gen.add_argument("--count", type=COUNT, default=20)
    gen.add_argument("--seed", type=SEED, default=0)
    gen.add_argument("--exclude", type=Path, help="JSON from find-text: photos already holding text, left out")
    gen.add_argument("--font", type=Path, action="append", default=[], help="another font file (repeatable)")
    text = sub.add_parser("find-text", help="list the photos in which the reference detector finds text")
    text.add_argument("photos", type=Path)
    text.add_argument("out", type=Path)
    text.add_argument("--limit-side", type=COUNT, default=736, help="the detector's limit side (default: rapidocr's 736)")
    text.add_argument("--limit-type", choices=resize_mode.LIMIT_TYPES, default=resize_mode.LIMIT_TYPE.default,
                      dest="limit")
    text.add_argument("--min-score", type=FRACTION, default=0.6)
    args = parser.parse_args(argv)
    if not args.photos.is_dir():
        parser.error(f"{args.photos} is not a folder")
    photos = _photo_files(args.photos)
    if args.command == "generate":
        if args.exclude:
            skip = set(json.loads(args.exclude.read_text())["photos"])  # text or a page box: either is unlabeled
            photos = [p for p in photos if p.name not in skip]
        settings = RenderSettings(fonts=default_fonts() + tuple(args.font))
        path = generate(photos, args.out, args.count, args.seed, settings)
        print(f"{path}: {args.count} photos")
        return 0
    from harness.detection.detector import TextDetector
    from harness.geometry import LimitSide

    detector = TextDetector(LimitSide(args.limit_side, args.limit))
    found = find_text(photos, detector, args.min_score, progress=lambda s: print(s, file=sys.stderr))
    setting = f"PP-OCRv6_det_small, limit side {args.limit_side} {args.limit}, db defaults"
    args.out.write_text(json.dumps({"detector": setting,
                                    "min_score": args.min_score, "searched": len(photos),
                                    "photos": found}, indent=1) + "\n")
    text = sum(f["text"] > 0 for f in found.values())
    print(f"{args.out}: {text} of {len(photos)} photos hold text; {len(found) - text} more only a whole-photo box")
    return 0


if __name__ == "__main__":
    sys.exit(main())
