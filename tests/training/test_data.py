"""Training data: the readers `harness accuracy` uses, stratified seeded fractions, shards."""

from __future__ import annotations

from collections import Counter

import pytest

from harness.accuracy import DatasetError
from harness.training.data import class_names, load_training_set, shard, stratified_fraction
from harness.training.preprocess import Preprocessing, parse_preprocessing
from tests.training.conftest import HYMENOPTERA


def test_hymenoptera_splits_and_classes():
    data = load_training_set(HYMENOPTERA)
    assert data.classes == ("ants", "bees")
    assert (len(data.train.samples), len(data.val.samples)) == (245, 153)
    assert Counter(s.label for s in data.train.samples) == {0: 124, 1: 121}


def test_fraction_is_stratified_seeded_and_ordered():
    samples = load_training_set(HYMENOPTERA).train.samples
    kept = stratified_fraction(samples, 0.05, seed=3)
    assert Counter(s.label for s in kept) == {0: 6, 1: 6}  # round(5% of 124) and round(5% of 121)
    assert kept == stratified_fraction(samples, 0.05, seed=3)
    assert kept != stratified_fraction(samples, 0.05, seed=4)
    positions = [samples.index(s) for s in kept]
    assert positions == sorted(positions)
    assert stratified_fraction(samples, 1.0, seed=0) == tuple(samples)
    assert Counter(s.label for s in stratified_fraction(samples, 0.001, seed=0)) == {0: 1, 1: 1}
    with pytest.raises(ValueError):
        stratified_fraction(samples, 0.0, seed=0)


@pytest.mark.parametrize("count", [0, 1, 7, 8])
def test_shards_are_disjoint_equal_and_complete(count):
    items = list(range(count))
    shards = [shard(items, rank, 3) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1
    assert set().union(*shards) == set(items)
    if count % 3 == 0:
        assert sorted(sum(shards, [])) == items


def test_csv_dataset_classes(tmp_path):
    ants = sorted((HYMENOPTERA / "train" / "ants").iterdir())[:2]
    csv = tmp_path / "labels.csv"
    csv.write_text("file,label\n" + "".join(f"{p},{name}\n" for p, name in zip(ants, ("insect", "ant"))))
    assert class_names(csv) == ("ant", "insect")
    data = load_training_set(csv)
    assert [s.label for s in data.train.samples] == [1, 0] and data.val is None


def test_unlabeled_directory_is_refused(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    with pytest.raises(DatasetError):
        load_training_set(tmp_path)


def test_preprocessing_choices():
    assert parse_preprocessing("deployed") == Preprocessing("deployed")
    assert parse_preprocessing("mix:0.25") == Preprocessing("mix", 0.25)
    assert str(parse_preprocessing("mix:0.25")) == "mix:0.25"
    for bad in ("dali", "mix", "mix:1.5", "mix:x"):
        with pytest.raises(ValueError):
            parse_preprocessing(bad)
