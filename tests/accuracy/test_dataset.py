"""harness/accuracy/dataset.py: the layouts it reads and the datasets it refuses (no server)."""

import shutil

import pytest

from harness.accuracy import DatasetError, load_dataset
from harness.model import read_labels
from tests.conftest import copy_photos


@pytest.fixture(scope="module")
def classes(repository):
    return read_labels(repository / "classifier" / "labels.txt")


def test_an_unknown_class_directory_is_named(tmp_path, photos_dir, classes):
    for directory in ("fox-squirrel", "335", "crane"):
        (tmp_path / directory).mkdir()
        shutil.copy(photos_dir / "squirrel_cls.jpg", tmp_path / directory / "a.jpg")
    with pytest.raises(DatasetError) as error:
        load_dataset(tmp_path, classes)
    message = str(error.value)
    assert "'fox-squirrel' (directory 'fox-squirrel') is not a known class (did you mean 'fox squirrel'?)" in message
    assert "'crane' (directory 'crane') names 2 classes (indices 134, 517): use the index" in message
    assert "'335'" not in message  # an index is a label


def test_datasets_that_would_lose_images_are_refused(tmp_path, photos_dir, classes):
    (tmp_path / "orange").mkdir()
    shutil.copy(photos_dir / "orange.jpg", tmp_path / "orange" / "a.jpg")
    shutil.copy(photos_dir / "baboon.jpg", tmp_path / "loose.jpg")
    with pytest.raises(DatasetError, match="files outside them: loose.jpg"):
        load_dataset(tmp_path, classes)

    flat = copy_photos(photos_dir, ("orange.jpg", "baboon.jpg"), tmp_path / "flat")
    (tmp_path / "labels.csv").write_text("flat/orange.jpg,orange\n")
    with pytest.raises(DatasetError, match=r"1 image\(s\) of .*flat have no row in .*labels.csv: baboon.jpg"):
        load_dataset(flat, classes, tmp_path / "labels.csv")
    (tmp_path / "labels.csv").write_text("flat/orange.jpg,orange\nflat/baboon.jpg,baboon\n")
    assert [s.label for s in load_dataset(flat, classes, tmp_path / "labels.csv").samples] == [950, 372]

    (tmp_path / "bad.csv").write_text("file,label\nflat/orange.jpg,orange,extra\n")
    with pytest.raises(DatasetError, match=r"bad.csv, line 2: expected two columns file,label"):
        load_dataset(tmp_path / "bad.csv", classes)
    (tmp_path / "twice.csv").write_text("flat/orange.jpg,orange\nflat/orange.jpg,950\n")
    with pytest.raises(DatasetError, match="line 2: 'flat/orange.jpg' is already listed on line 1"):
        load_dataset(tmp_path / "twice.csv", classes)
    (tmp_path / "out_of_range.csv").write_text("flat/orange.jpg,1000\n")
    with pytest.raises(DatasetError, match=r"'1000' \(line 1\) is not a known class.*index 0-999"):
        load_dataset(tmp_path / "out_of_range.csv", classes)


def test_coco_labels_beside_a_folder_of_their_images_name_the_command(tmp_path, photos_dir):
    """labels.json with its images in a sub-folder: the error says where they are and how to
    run it (issue 34), and that command reads the set."""
    import json

    names = sorted(p.name for p in photos_dir.iterdir())[:2]
    (tmp_path / "pics").mkdir()
    for name in names:
        (tmp_path / "pics" / name).write_bytes((photos_dir / name).read_bytes())
    coco = {"images": [{"id": i, "file_name": n, "height": 10, "width": 10} for i, n in enumerate(names)],
            "categories": [{"id": 1, "name": "text"}],
            "annotations": [{"id": 1, "image_id": 0, "category_id": 1, "bbox": [1, 1, 3, 3]}]}
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(coco))
    with pytest.raises(DatasetError, match=f"they are in {tmp_path / 'pics'}: run `harness accuracy "
                                           f"{tmp_path / 'pics'} --labels {labels}`"):
        load_dataset(labels, None)
    dataset = load_dataset(tmp_path / "pics", None, labels)
    assert dataset.layout == "coco" and [s.name for s in dataset.samples] == names


def test_a_model_is_probed_with_a_csv_datasets_images_never_the_csv(photos_dir, tmp_path):
    """`harness accuracy labels.csv --model NAME` probes the deployment with the images the CSV names
    (it once sent the CSV file itself, which the server could not decode)."""
    from harness.accuracy.job import _probe_images
    from tests.conftest import copy_photos

    copy_photos(photos_dir, ["baboon.jpg", "fruits.jpg"], tmp_path)
    (tmp_path / "labels.csv").write_text("file,label\nbaboon.jpg,baboon\nfruits.jpg,banana\n")
    assert [p.name for p in _probe_images(tmp_path / "labels.csv")] == ["baboon.jpg", "fruits.jpg"]
    assert [p.name for p in _probe_images(tmp_path, tmp_path / "labels.csv")] == ["baboon.jpg", "fruits.jpg"]
