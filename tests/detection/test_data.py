"""harness/detection/data.py: words rendered onto real photos with exact labels, the same
for the same seed, readable by pycocotools, and found by the real detector."""

from __future__ import annotations

import json
import random

import numpy as np
import shapely
from PIL import Image
from pycocotools.coco import COCO

from harness.detection.data import RenderSettings, generate, main, render_words
from tests.detection.conftest import CLEAN_PHOTOS


def test_labels_are_exact_around_the_pixels_each_word_changed(sample):
    photo = np.asarray(Image.open(sample / CLEAN_PHOTOS[1]).convert("RGB"))
    settings = RenderSettings(words=(1, 1))
    for seed in range(6):  # one word at a time: every changed pixel is that word's
        drawn, [word] = render_words(photo, random.Random(seed), settings)
        ys, xs = np.nonzero(np.any(drawn != photo, axis=2))
        x, y, w, h = word.bbox
        changed = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        box = np.array([x, y, x + w, y + h])
        # the box holds every changed pixel; an edge pixel of faint anti-aliasing may round back to the photo's value
        assert (changed[:2] >= box[:2]).all() and (changed[2:] <= box[2:]).all() and np.abs(changed - box).max() <= 1, seed
        quad = shapely.Polygon(word.quad).buffer(1.0)  # the quad holds the ink (to its anti-aliased edge)
        inside = shapely.contains_xy(quad, xs + 0.5, ys + 0.5)
        assert inside.mean() > 0.995, (seed, inside.mean())
        assert shapely.Polygon(word.quad).area <= w * h + 1e-6  # never looser than the enclosing box


def test_the_same_seed_gives_the_same_set_and_pycocotools_reads_it(sample, tmp_path, labeled):
    again = generate([sample / n for n in CLEAN_PHOTOS], tmp_path / "again", len(CLEAN_PHOTOS), seed=0)
    first, second = json.loads(labeled.read_text()), json.loads(again.read_text())
    assert first == second
    for image in first["images"]:
        assert (labeled.parent / image["file_name"]).read_bytes() == (again.parent / image["file_name"]).read_bytes()
    other = json.loads(generate([sample / n for n in CLEAN_PHOTOS], tmp_path / "other", 4, seed=1).read_text())
    assert other["annotations"] != first["annotations"][:len(other["annotations"])]
    coco = COCO(str(labeled))
    assert len(coco.getImgIds()) == len(CLEAN_PHOTOS) and len(coco.getAnnIds()) == len(first["annotations"]) >= 16
    fonts = {a["font"] for a in first["annotations"]}
    assert len(fonts) >= 3 and all(len(a["segmentation"][0]) == 8 for a in first["annotations"])


def test_the_command_line_generates_and_refuses_a_missing_folder(sample, tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in CLEAN_PHOTOS[:3]:
        (folder / name).write_bytes((sample / name).read_bytes())
    assert main(["generate", str(folder), str(tmp_path / "out"), "--count", "2", "--seed", "3"]) == 0
    assert len(json.loads((tmp_path / "out" / "labels.json").read_text())["images"]) == 2
    try:
        main(["generate", str(tmp_path / "nowhere"), str(tmp_path / "x")])
    except SystemExit as exc:
        assert exc.code == 2
    assert "is not a folder" in capsys.readouterr().err
