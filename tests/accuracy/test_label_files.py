"""Label files treated as check treats images (issue 45), without a server: a COCO annotation
whose box is NaN, infinite, absurd or of negative size makes its own image a failed row (no
shapely or pycocotools traceback after the whole run); labels nested 100,000 deep are refused up
front in one line; an image named outside the dataset's folder (``..``, an absolute path, a link
leading out) is its own row and never read; a segmentation mask is read as an input (a link out
refused), sized from its header before it is decoded, found by the photo's real file name; every
report table escapes a name and a reason the same way."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from harness.accuracy.dataset import DatasetError, load_dataset, read_sample
from harness.detection.effect import LabelsError, load_labels
from harness.files import InputFileError
from harness.segmentation.effect import MaskLabelError, evaluate_segmentation, load_mask


def coco(images: list[str], boxes: list[list]) -> dict:
    return {"images": [{"id": i, "file_name": name} for i, name in enumerate(images)],
            "categories": [{"id": 1, "name": "text"}],
            "annotations": [{"id": k, "image_id": k % len(images), "category_id": 1, "bbox": box, "text": "word"}
                            for k, box in enumerate(boxes)]}


@pytest.mark.parametrize("box, why", [([float("nan"), 10, float("inf"), 5], "is not finite"),
                                      ([1e308, 10, 5, 5], "lies beyond any image the deployment decodes"),
                                      ([10, 10, -5, 5], "has a negative size")])
def test_an_unusable_box_makes_its_image_a_failed_row_not_the_run(tmp_path, box, why):
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "b.jpg").write_bytes(b"x")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(coco(["a.jpg", "b.jpg"], [[1, 2, 30, 10], box])))  # NaN/Infinity: Python's JSON
    found = load_labels(labels)
    assert list(found.unusable) == ["b.jpg"] and why in found.unusable["b.jpg"]
    assert [a["image_id"] for a in found.coco["annotations"]] == [0]  # pycocotools never sees it
    dataset = load_dataset(labels, None)
    bad = {s.name: s for s in dataset.samples}["b.jpg"]
    with pytest.raises(InputFileError, match=why):
        read_sample(bad)
    assert read_sample({s.name: s for s in dataset.samples}["a.jpg"]) == b"x"


def test_labels_nested_too_deep_are_refused_in_one_line(tmp_path):
    labels = tmp_path / "labels.json"
    labels.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LabelsError, match="nested too deep"):
        load_labels(labels)
    with pytest.raises(DatasetError, match="nested too deep"):
        load_dataset(labels, None)


def test_an_image_named_outside_the_folder_is_its_own_row_and_never_read(tmp_path):
    images, outside = tmp_path / "set", tmp_path / "secret.txt"
    images.mkdir()
    outside.write_text("the secret")
    (images / "good.jpg").write_bytes(b"x")
    os.symlink(outside, images / "link.jpg")
    labels = images / "labels.json"
    names = ["good.jpg", "../secret.txt", str(outside), "link.jpg"]
    labels.write_text(json.dumps(coco(names, [[1, 2, 3, 4]] * 4)))
    samples = {s.name: s for s in load_dataset(labels, None).samples}
    assert read_sample(samples["good.jpg"]) == b"x"
    for name, why in (("../secret.txt", "not a path inside"), (str(outside), "not a path inside"),
                      ("link.jpg", "symbolic link to outside the folder")):
        with pytest.raises(InputFileError, match=why):
            read_sample(samples[name])


def test_a_csv_naming_a_file_outside_its_folder_is_that_rows_failure(tmp_path):
    (tmp_path / "secret.jpg").write_bytes(b"secret")
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(b"x")
    (folder / "labels.csv").write_text("file,label\na.jpg,0\n../secret.jpg,1\n")
    samples = {s.name: s for s in load_dataset(folder / "labels.csv", None).samples}
    assert read_sample(samples["a.jpg"]) == b"x"
    with pytest.raises(InputFileError, match="not a path inside"):
        read_sample(samples["../secret.jpg"])


def mask_set(tmp_path, names: list[str]):
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir(), masks.mkdir()
    for name in names:
        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(images / os.fsdecode(name))
    return images, masks


def test_a_mask_is_found_by_the_photos_real_name(tmp_path):
    names = [b"caf\xe9.jpg", "a\x1bb.jpg".encode()]
    images, masks = mask_set(tmp_path, names)
    label = np.zeros((20, 30), np.uint8)
    label[5:15, 5:20] = 255
    for name in names:
        Image.fromarray(label).save(masks / os.fsdecode(name.replace(b".jpg", b".png")))
    dataset = load_dataset(images, None, masks)
    result = np.stack([label / 255.0, label / 255.0]).astype(np.float32)
    found = {s.name: result for s in dataset.samples}
    effect = evaluate_segmentation(masks, {s.name: s.path for s in dataset.samples}, [("reference", found)])
    assert not effect.unlabeled and len(effect.evaluated) == 2 and effect.paths[0].means["iou"] == 1.0


def test_a_huge_mask_is_refused_by_its_header_before_it_is_decoded(tmp_path, monkeypatch):
    import cv2

    images, masks = mask_set(tmp_path, [b"a.jpg"])
    ok, png = cv2.imencode(".png", np.zeros((4000, 4000), np.uint16))  # 32 MB of 16-bit pixels in 40 KB
    (masks / "a.png").write_bytes(png.tobytes())

    def decoded(*args, **kwargs):
        raise AssertionError("the mask was decoded before its size was checked")

    monkeypatch.setattr(cv2, "imdecode", decoded)
    monkeypatch.setattr(cv2, "imread", decoded)
    with pytest.raises(MaskLabelError, match="a.png is 4000x4000, its photo 30x20"):
        load_mask(masks, images / "a.jpg", (20, 30))
    (masks / "a.png").write_bytes(png.tobytes()[:33] + b"\x00" * 10)  # a header only: refused by the guard
    with pytest.raises(MaskLabelError, match="not an image that can be read"):
        load_mask(masks, images / "a.jpg", (20, 30))


def test_a_mask_that_is_a_link_out_of_its_folder_is_refused(tmp_path):
    images, masks = mask_set(tmp_path, [b"a.jpg"])
    Image.fromarray(np.zeros((20, 30), np.uint8)).save(tmp_path / "elsewhere.png")
    os.symlink(tmp_path / "elsewhere.png", masks / "a.png")
    with pytest.raises(MaskLabelError, match="symbolic link to outside the folder"):
        load_mask(masks, images / "a.jpg", (20, 30))


def test_the_unusable_labels_table_escapes_names_and_reasons_as_every_table_does(tmp_path):
    name = "x|<b>y<i>.jpg"
    images, masks = mask_set(tmp_path, [name.encode()])
    found = {name: np.zeros((2, 20, 30), np.float32)}
    effect = evaluate_segmentation(masks, {name: images / name}, [("reference", found), ("dali", found)])
    row = next(line for line in effect.markdown() if "y" in line and "x" in line and "|" in line and "missing" in line)
    cells = [c for c in row.replace("\\|", "").split("|")]
    assert len(cells) == 4, row  # "", name, reason, "": the name's | escaped in the code span and in the reason
    assert "<b>" not in row.split("`")[-1], row  # the reason's HTML escaped, as the Failed images table's
