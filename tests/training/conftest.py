"""Fixtures for the training tests: small real slices of the ants-vs-bees set."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.paths import PROJECT_ROOT

HYMENOPTERA = PROJECT_ROOT.parent / "shared" / "datasets" / "hymenoptera"


def hymenoptera_slice(out: Path, train: int, val: int) -> Path:
    """``out`` with train/ and val/ ImageFolders of the first ``train`` / ``val`` photos of each class."""
    assert HYMENOPTERA.is_dir(), f"{HYMENOPTERA} missing: the training tests use the shared ants-vs-bees photos"
    for split, count in (("train", train), ("val", val)):
        for class_dir in sorted((HYMENOPTERA / split).iterdir()):
            target = out / split / class_dir.name
            target.mkdir(parents=True, exist_ok=True)
            for photo in sorted(class_dir.iterdir())[:count]:
                shutil.copy(photo, target / photo.name)
    return out


@pytest.fixture(scope="session")
def tiny_set(tmp_path_factory) -> Path:
    """4 training and 3 validation photos per class."""
    return hymenoptera_slice(tmp_path_factory.mktemp("hymenoptera"), 4, 3)
