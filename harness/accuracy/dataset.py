"""The labeled image set: an ImageFolder layout, a CSV of ``file,label`` rows, or a flat
directory of unlabeled images (flip rates only). Labels are class names from the model's
``labels.txt`` or class indices."""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from harness.corpus import list_images
from harness.errors import HarnessError
from harness.files import InputFileError
from harness.listing import InputFile, Skipped, file_in, list_inputs, read_input
from harness.names import identifier

CSV_HEADER_FILE = ("file", "path", "image", "filename")
CSV_HEADER_LABEL = ("label", "class")


class DatasetError(HarnessError, ValueError):
    """The dataset cannot be read: the message names the file, directory or label at fault."""


@dataclass(frozen=True)
class Sample:
    name: str
    """How the image is reported: its path relative to the dataset (or as the CSV gives it)."""
    path: Path
    label: int | None
    """Class index; None in an unlabeled dataset."""
    error: str | None = None
    """Why this image cannot be read as its label file names it (a name leading outside the
    dataset's folder, a label that cannot be used): the image's failed row on every path."""


@dataclass(frozen=True)
class Dataset:
    source: Path
    layout: str
    """"imagefolder", "csv", "coco" (a detection set: labeled boxes), "masks" (a segmentation
    set: ``source`` the folder of its masks) or "unlabeled"."""
    samples: tuple[Sample, ...]
    label_names: tuple[str, ...] = ()
    """Label index -> name (the model's classes, or a retrieval set's own labels)."""
    skipped: tuple = ()
    """Folder entries that are not images (:class:`harness.listing.Skipped`: hidden, a link
    leading out, ...), each with why: listed as check lists them (``dir/name`` in a class directory)."""

    @property
    def labeled(self) -> bool:
        return self.layout != "unlabeled"

    def label_name(self, sample: Sample) -> str | None:
        return None if sample.label is None else self.label_names[sample.label]


def read_sample(sample: Sample) -> bytes:
    """The bytes of one image of the set (:func:`harness.listing.read_input`), or the
    :class:`harness.files.InputFileError` saying why its label file's entry cannot be read."""
    if sample.error is not None:
        raise InputFileError(sample.name, sample.error)
    return read_input(InputFile.of(sample.path))


def _sample(name: str, folder: Path, label: int | None, error: str | None = None) -> Sample:
    """The image a label file names ``name``, inside ``folder`` by the listing's policy
    (:func:`harness.listing.file_in`); one that leads outside is a sample whose error says so."""
    try:
        return Sample(name, file_in(folder, name).target, label, error)
    except FileNotFoundError:
        return Sample(name, folder / name, label, error)
    except InputFileError as exc:
        return Sample(name, folder / name, label, exc.reason)


def read_coco(labels: Path, images: Path) -> Dataset:
    """A COCO detection set (``labels``: its JSON; a detector's labeled boxes, scored by
    :mod:`harness.detection.effect`): its images, by ``file_name``, in ``images``. Every image
    the file lists must be there; one named outside the folder (absolute, ``..``, a link
    leading out) or whose annotations cannot be used is its own failed row, never read."""
    from harness.detection.effect import LabelsError, load_labels  # here: loads shapely only when called

    try:
        found = load_labels(labels)
    except LabelsError as exc:
        raise DatasetError(str(exc)) from None
    samples = tuple(_sample(name, images, None, found.unusable.get(name)) for name in found.boxes)
    missing = [s.name for s in samples if s.error is None and not s.path.is_file()]
    if missing:
        # The usual layout keeps the images in a folder beside the JSON: name it, and the command that reads it.
        holding = next((d for d in sorted(images.iterdir()) if d.is_dir() and all((d / m).is_file() for m in missing)),
                       None) if images.is_dir() else None
        hint = (f"; they are in {holding}: run `harness accuracy {holding} --labels {labels}`" if holding else "")
        raise DatasetError(f"{len(missing)} image(s) {labels} lists are not in {images}: {abbreviated(missing)}{hint}")
    return Dataset(labels, "coco", samples)


def read_masks(images: Path, masks: Path) -> Dataset:
    """A segmentation set (scored by :mod:`harness.segmentation.effect`): the images of
    ``images``, each labeled by the PNG of its stem in ``masks``. A missing or unusable mask is
    that image's error row when the set is scored, not a refusal of the whole set."""
    if not images.is_dir():
        raise DatasetError(f"{images}: a segmentation set's images are a folder (their masks in --labels {masks})")
    found = list_images(images)
    if not found:
        raise DatasetError(f"no images in {images}")
    return Dataset(masks, "masks", tuple(Sample(identifier(p), p, None) for p in found),
                   skipped=tuple(list_inputs(images).skipped))


def load_dataset(dataset: Path, classes: Sequence[str] | None, labels_csv: Path | None = None) -> Dataset:
    """Read a dataset whose labels are names from ``classes`` (the model's labels, in output
    order) or class indices; ``classes`` None: labels are any names (retrieval groups images
    by label), indexed in sorted order (:attr:`Dataset.label_names`).

    ``dataset`` is a CSV file of ``file,label`` rows, or a directory: with ``labels_csv``
    its images are labeled by that CSV (every image of the directory needs a row); with
    class sub-directories it is an ImageFolder layout; with only files it is unlabeled.
    Raises :class:`DatasetError` naming every unknown label, or an image without one."""
    if not dataset.exists():
        raise DatasetError(f"dataset not found: {dataset}")
    if not (dataset.is_dir() or dataset.is_file()):
        raise DatasetError(f"{dataset}: neither a folder nor a file (give a folder of images or a CSV or JSON of labels)")
    coco = dataset if dataset.suffix.lower() == ".json" else labels_csv if labels_csv and labels_csv.suffix.lower() == ".json" \
        else None
    if coco is not None:
        return read_coco(coco, dataset.parent if dataset.is_file() else dataset)
    if labels_csv is not None and labels_csv.is_dir():
        return read_masks(dataset, labels_csv)
    if dataset.is_file():
        if labels_csv is not None:
            raise DatasetError(f"{dataset} is a file: give a CSV dataset either as DATASET or with --labels, not both")
        return Dataset(dataset, "csv", *_read_csv(dataset, classes))
    if labels_csv is not None:
        # Files are relative to the CSV's folder, or else to the dataset's (a CSV kept elsewhere).
        samples, names = _read_csv(labels_csv, classes, dataset)
        labeled = {s.path.resolve() for s in samples}
        unlabeled = [identifier(p) for p in list_images(dataset)
                     if p.resolve() not in labeled and p.suffix.lower() != ".csv"]  # a label file is no image
        if unlabeled:
            raise DatasetError(f"{len(unlabeled)} image(s) of {dataset} have no row in {labels_csv}: {abbreviated(unlabeled)}")
        return Dataset(dataset, "csv", samples, names)
    class_dirs = sorted(p for p in dataset.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not class_dirs:
        images = list_images(dataset)
        if not images:
            raise DatasetError(f"no images in {dataset}")
        return Dataset(dataset, "unlabeled", tuple(Sample(identifier(p), p, None) for p in images),
                       skipped=tuple(list_inputs(dataset).skipped))
    return Dataset(dataset, "imagefolder", *_read_image_folder(dataset, class_dirs, classes),
                   skipped=_folder_skipped(dataset, class_dirs))


def _folder_skipped(root: Path, class_dirs: list[Path]) -> tuple:
    """The entries of an ImageFolder that are not images: at the root (its class directories
    aside) and in each class directory (named ``class/entry``)."""
    classes = {identifier(d) for d in class_dirs}
    out = [s for s in list_inputs(root).skipped if s.name not in classes]
    for d in class_dirs:
        out += [Skipped(f"{identifier(d)}/{s.name}", s.reason) for s in list_inputs(d).skipped]
    return tuple(out)


def _read_image_folder(root: Path, class_dirs: list[Path],
                       classes: Sequence[str] | None) -> tuple[tuple[Sample, ...], tuple[str, ...]]:
    loose = [identifier(p) for p in list_images(root)]
    if loose:  # an ImageFolder reader would skip them: say so instead
        raise DatasetError(f"{root} has class directories and also files outside them: {abbreviated(loose)}; "
                           "in an ImageFolder layout every image is inside its class's directory")
    nested = [f"{d.name}/{p.name}" for d in class_dirs for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if nested:
        raise DatasetError(f"class directories of {root} hold sub-directories: {abbreviated(nested)}; "
                           "an ImageFolder layout is one level of class directories")
    classes = free_classes([d.name for d in class_dirs]) if classes is None else classes
    indices = class_indices({d.name: f"directory {d.name!r}" for d in class_dirs}, classes, str(root))
    samples = [Sample(f"{identifier(d)}/{identifier(p)}", p, indices[d.name]) for d in class_dirs for p in list_images(d)]
    if not samples:
        raise DatasetError(f"no images in the class directories of {root}")
    return tuple(samples), tuple(classes)


def free_classes(labels: Sequence[str]) -> list[str]:
    """Labels that name no model class, as classes of their own (sorted; digits are names too)."""
    return sorted(set(labels))


def _read_csv(path: Path, classes: Sequence[str] | None,
              base: Path | None = None) -> tuple[tuple[Sample, ...], tuple[str, ...]]:
    if not path.is_file():
        raise DatasetError(f"label file not found: {path}")
    rows: list[tuple[int, str, str]] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        for row in reader:
            line_number = reader.line_num
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue
            if len(cells) != 2 or not all(cells):
                raise DatasetError(f"{path}, line {line_number}: expected two columns file,label, got {row}")
            if not rows and cells[0].lower() in CSV_HEADER_FILE and cells[1].lower() in CSV_HEADER_LABEL:
                continue  # a header row
            rows.append((line_number, *cells))
    if not rows:
        raise DatasetError(f"{path}: no file,label rows")
    first_line: dict[str, int] = {}
    for line_number, file, _ in rows:
        if file in first_line:
            raise DatasetError(f"{path}, line {line_number}: {file!r} is already listed on line {first_line[file]}")
        first_line[file] = line_number
    if classes is None:
        classes = free_classes([label for _, _, label in rows])
        indices = {name: i for i, name in enumerate(classes)}
    else:
        # Each label is named by the first line it appears on (later lines overwrite earlier ones in a dict).
        indices = class_indices({label: f"line {n}" for n, _, label in reversed(rows)}, classes, str(path))
    # A row whose file is missing stays in: it becomes a failed image with the reason.
    def where(file: str, label: int) -> Sample:
        here = _sample(file, path.parent, label)
        if base is None or here.error is not None or here.path.exists():
            return here
        there = _sample(file, base, label)
        return there if there.error is not None or there.path.exists() else here

    return tuple(where(file, indices[label]) for _, file, label in rows), tuple(classes)


def class_indices(labels: Mapping[str, str], classes: Sequence[str], source: str) -> dict[str, int]:
    """Label (class name or index) -> class index, for labels given as {label: where it was
    found}. Raises :class:`DatasetError` listing every label that names no single class."""
    by_name: dict[str, list[int]] = {}
    for index, name in enumerate(classes):
        by_name.setdefault(name, []).append(index)
    indices, problems = {}, []
    for label, where in labels.items():
        if label.isdigit() and int(label) < len(classes):
            indices[label] = int(label)
        elif len(by_name.get(label, ())) == 1:
            indices[label] = by_name[label][0]
        elif label in by_name:
            problems.append(f"{label!r} ({where}) names {len(by_name[label])} classes "
                            f"(indices {', '.join(map(str, by_name[label]))}): use the index")
        else:
            close = difflib.get_close_matches(label, list(by_name), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{label!r} ({where}) is not a known class{hint}")
    if problems:
        raise DatasetError(f"{source}: {'; '.join(problems)}. A label is a class name "
                           f"from the model's labels.txt or a class index 0-{len(classes) - 1}")
    return indices


def abbreviated(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
