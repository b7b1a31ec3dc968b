"""harness/segmentation/data.py and effect.py without a server: composites whose label is the
pasted region, and labels that cannot be used (missing, another size) as error rows."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.accuracy.dataset import load_dataset
from harness.segmentation.data import CORE, composite, generate, main, object_core, reference_matte
from harness.segmentation.effect import MaskLabelError, evaluate_segmentation, load_mask
from tests.segmentation.conftest import SAMPLE

OBJECTS = ("n01440764_tench.JPEG", "n07747607_orange.JPEG")
BACKGROUNDS = ("n09428293_seashore.JPEG", "n09193705_alp.JPEG")


@pytest.fixture(scope="module")
def matte(repository):
    return reference_matte(repository.parent)


def test_the_label_is_the_pasted_region(matte, tmp_path):
    made = generate([SAMPLE / n for n in OBJECTS], [SAMPLE / n for n in BACKGROUNDS], tmp_path, 2, seed=1, matte=matte)
    assert len(made) == 2
    for c in made:
        photo = np.asarray(Image.open(SAMPLE / c.source).convert("RGB"))
        back = np.asarray(Image.open(SAMPLE / c.background).convert("RGB"))
        core = matte((SAMPLE / c.source).read_bytes()) >= CORE
        assert np.array_equal(c.mask, core) and 0.05 <= c.mask.mean() <= 0.6
        assert np.array_equal(c.image[c.mask], photo[c.mask])  # the object's own pixels where the label is 1
        assert np.array_equal(c.image, composite(photo, c.mask, back)) and not np.array_equal(c.image, photo)
        written = np.asarray(Image.open(tmp_path / "masks" / f"{c.name}.png"))
        assert np.array_equal(written, c.mask.astype(np.uint8) * 255)
        assert Image.open(tmp_path / "images" / f"{c.name}.jpg").size == written.shape[::-1]
    # the generator's own scoring of its labels against themselves: a perfect score
    found = {f"{c.name}.jpg": np.stack([c.mask, c.mask]).astype(np.float32) for c in made}
    effect = evaluate_segmentation(tmp_path / "masks", list(found), [("reference", found)])
    assert effect.paths[0].means == {"iou": 1.0, "dice": 1.0, "boundary_f": 1.0, "matte_mae": 0.0}


def test_a_photo_without_a_confident_object_is_skipped_and_too_few_is_an_error(matte, tmp_path):
    flat = tmp_path / "flat.png"
    Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(flat)
    assert object_core(np.full((64, 64), 0.5, np.float32)) is None
    with pytest.raises(ValueError, match="only 0 of the 1 photos hold a usable object"):
        generate([flat], [SAMPLE / BACKGROUNDS[0]], tmp_path / "out", 1, matte=matte)
    with pytest.raises(SystemExit) as exited:  # the command line names the folder that is not one
        main(["generate", str(tmp_path / "missing"), str(tmp_path), str(tmp_path / "x")])
    assert exited.value.code == 2


def test_labels_that_cannot_be_used_are_error_rows_not_a_crash(tmp_path):
    masks, images = tmp_path / "masks", tmp_path / "images"
    masks.mkdir(), images.mkdir()
    label = np.zeros((20, 30), np.uint8)
    label[5:15, 10:20] = 255
    for name in ("good", "small", "missing"):
        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(images / f"{name}.jpg")
    Image.fromarray(label).save(masks / "good.png")
    Image.fromarray(label[:10]).save(masks / "small.png")
    dataset = load_dataset(images, None, masks)
    assert dataset.layout == "masks" and [s.name for s in dataset.samples] == ["good.jpg", "missing.jpg", "small.jpg"]
    right = np.stack([label / 255.0, label / 255.0]).astype(np.float32)
    half = right.copy()
    half[:, :, 15:] = 0  # half the object found
    found = [("reference", dict.fromkeys(("good.jpg", "missing.jpg", "small.jpg"), right)),
             ("dali", dict.fromkeys(("good.jpg", "missing.jpg", "small.jpg"), half))]
    effect = evaluate_segmentation(masks, [s.name for s in dataset.samples], found, [{"good.jpg": "diverged"}])
    assert effect.evaluated == ("good.jpg",)
    assert "missing.png is missing" in effect.unlabeled["missing.jpg"]
    assert "small.png is 30x10, its photo 30x20" in effect.unlabeled["small.jpg"]
    reference, dali = effect.paths
    assert reference.means["iou"] == 1.0 and dali.means["iou"] == pytest.approx(0.5)
    assert dali.means["matte_mae"] == pytest.approx(50 / 600) and dali.changes == {"good.jpg": "diverged"}
    assert dali.wilcoxon.differing == 1 and dali.wilcoxon.better == 0
    text = "\n".join(effect.markdown())
    assert "Labels that cannot be used (2" in text and "| dali | 0.5" in text
    (case,) = effect.cases(["segment_dali"], False, "accuracy.segmentation")  # the JUnit row: failed, named
    assert case.status.value == "failed" and "masks changed on 1 of 1 images" in case.reason
    assert effect.to_dict()["unlabeled"] == effect.unlabeled


def test_a_mask_of_class_indices_is_read_as_classes(tmp_path):
    classes = np.zeros((8, 8), np.uint8)
    classes[:4], classes[4:, :4] = 1, 2
    Image.fromarray(classes).save(tmp_path / "a.png")
    assert np.array_equal(load_mask(tmp_path, "a.jpg", (8, 8)), classes)
    with pytest.raises(MaskLabelError, match="not an image"):
        (tmp_path / "b.png").write_bytes(b"not a png")
        load_mask(tmp_path, "b.jpg", (8, 8))


def test_masks_given_to_another_task_and_a_coco_set_to_segmentation_are_refused(tmp_path):
    from tests.commands import harness

    masks, images = tmp_path / "masks", tmp_path / "images"
    masks.mkdir(), images.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(images / "a.jpg")
    result = harness("accuracy", images, "--labels", masks, "--task", "detection", "--report", tmp_path / "r")
    assert result.returncode == 2 and "a segmentation (a folder of masks) dataset, but the task is detection" in \
        result.stderr, result.stdout + result.stderr
    (tmp_path / "labels.json").write_text('{"images": [], "annotations": [], "categories": []}')
    result = harness("accuracy", images, "--labels", tmp_path / "labels.json", "--task", "segmentation", "--report",
                     tmp_path / "r2")
    assert result.returncode == 2 and "a COCO detection dataset, but the task is segmentation" in result.stderr, \
        result.stdout + result.stderr
