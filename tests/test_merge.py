"""harness/merge.py and harness/shard.py: the corpus checked in 3 shards against the real
server and merged gives the report one run gives; merge refuses what would not be one run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.check.job import CheckOptions, run
from harness.corpus import list_images
from harness.errors import UsageError
from harness.merge import merge
from harness.paths import PROJECT_ROOT
from harness.session import Session
from harness.shard import SHARD_FILENAME, Shard, ShardRecord
from harness.target import Target
from tests.commands import harness

IMAGENET_SAMPLE = PROJECT_ROOT.parent / "shared" / "datasets" / "imagenet-sample"
MISALIGNED = PROJECT_ROOT / "specs" / "misaligned_resize.toml"
"""Divergent stages, flips and ties: a report with everything to merge."""


def check(server, images: Path, report: Path, shard: Shard | None = None, spec: Path = MISALIGNED,
          target: Target = Target()):
    """A check run in-process; its default files but report.html (no test here reads it)."""
    return run(Session(url=server.grpc_url, spec_file=spec),
               CheckOptions(images, report, target, shard=shard, formats=("json", "md", "csv")))


@pytest.fixture(scope="module")
def corpus(photos_dir, tmp_path_factory) -> Path:
    """The 65 photos, a truncated JPEG and a text file (two failed rows to merge too)."""
    images = tmp_path_factory.mktemp("corpus")
    for photo in list_images(photos_dir):
        shutil.copyfile(photo, images / photo.name)
    (images / "truncated.jpg").write_bytes((photos_dir / "baboon.jpg").read_bytes()[:3000])
    (images / "notes.txt").write_text("not an image\n")
    return images


@pytest.fixture(scope="module")
def runs(server, corpus, tmp_path_factory):
    """One run over every image, and the same images in 3 shards."""
    out = tmp_path_factory.mktemp("runs")
    whole = check(server, corpus, out / "whole")
    shards = [check(server, corpus, out / f"shard-{k}", Shard(k, 3)) for k in range(3)]
    return out, whole, shards


def comparable(report: dict) -> dict:
    """report.json without what differs between any two runs: the time taken."""
    return {**report, "run": {k: v for k, v in report["run"].items() if k != "seconds"}}


def test_three_shards_merged_are_the_report_of_one_run(runs, corpus, tmp_path):
    out, whole, shards = runs
    assert sum(s.report.summary.images for s in shards) == whole.report.summary.images == 67
    assert all(s.report.summary.images for s in shards)  # each shard checked some of them
    merged = merge([out / "shard-2", out / "shard-0", out / "shard-1"], tmp_path / "merged")  # any order
    one, joined = json.loads(whole.paths["json"].read_text()), json.loads(merged.paths["json"].read_text())
    assert comparable(joined) == comparable(one)
    # what there is to compare: divergent stages, flips, failed rows
    assert one["first_divergent_stage"] == "resize" and one["verdict"] == "diverged"
    assert one["flips"] and len(one["failed"]) == 2 and one["compared"] == 65
    assert joined["run"]["seconds"] == max(s.report.run.seconds for s in shards)
    assert merged.exit_status() == whole.exit_status() == 1
    # the per-image files hold every image once, and the worst images' visuals are one run's
    lines = [json.loads(line) for line in (tmp_path / "merged" / "images.jsonl").read_text().splitlines()]
    assert sorted(r["image"] for r in lines) == sorted(p.name for p in list_images(corpus))
    assert (tmp_path / "merged" / "per_image.csv").read_text().count("\n") == 68
    assert sorted(p.name for p in (tmp_path / "merged" / "visuals").iterdir()) == \
        sorted(p.name for p in (out / "whole" / "visuals").iterdir())
    assert "Top-1 agreement" in (tmp_path / "merged" / "report.md").read_text()


def test_each_shard_records_its_place_in_the_split(runs, corpus):
    out, _, shards = runs
    listed = list_images(corpus)
    for k, shard in enumerate(shards):
        record = ShardRecord.read(out / f"shard-{k}")
        assert record == ShardRecord.of(Shard(k, 3), [p.name for p in listed])
        assert record.selected == shard.report.summary.images
    assert sum(ShardRecord.read(out / f"shard-{k}").selected for k in range(3)) == len(listed)


def test_a_missing_or_repeated_shard_is_refused(runs, tmp_path):
    out = runs[0]
    with pytest.raises(UsageError, match=r"shard 2/3 missing: merging needs all 3 \(given 0/3, 1/3\)"):
        merge([out / "shard-0", out / "shard-1"], tmp_path / "m")
    with pytest.raises(UsageError, match=r"shard 1/3 given twice: .*shard-1 and .*shard-1"):
        merge([out / "shard-0", out / "shard-1", out / "shard-1", out / "shard-2"], tmp_path / "m")
    with pytest.raises(UsageError, match="not a shard of a sharded run"):
        merge([out / "whole", out / "shard-1", out / "shard-2"], tmp_path / "m")
    assert not (tmp_path / "m").exists()  # refused before anything is written


def test_an_unfinished_or_tampered_shard_is_refused(runs, tmp_path):
    out = runs[0]
    for k in range(3):
        shutil.copytree(out / f"shard-{k}", tmp_path / f"shard-{k}")
    images = tmp_path / "shard-1" / "images.jsonl"
    rows = images.read_text().splitlines(keepends=True)
    images.write_text("".join(rows[:-1]))  # as if it stopped one image short
    shards = [tmp_path / f"shard-{k}" for k in range(3)]
    with pytest.raises(UsageError, match=rf"shard 1/3 .* reported {len(rows) - 1} of its {len(rows)} images"):
        merge(shards, tmp_path / "m")
    images.write_text("".join(rows) + (tmp_path / "shard-2" / "images.jsonl").read_text().splitlines(keepends=True)[0])
    with pytest.raises(UsageError, match="an image of another shard"):
        merge(shards, tmp_path / "m")
    images.write_text("".join(rows[:-1]) + "{not json\n")
    with pytest.raises(UsageError, match=rf"shard-1/images.jsonl, line {len(rows)}: not an image's result"):
        merge(shards, tmp_path / "m")
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".m.*"))  # nothing left behind


def test_shards_of_another_spec_deployment_or_listing_are_refused(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg"):
        shutil.copyfile(photos_dir / name, images / name)
    for k in range(2):
        check(server, images, tmp_path / f"aligned-{k}", Shard(k, 2), spec=None)
    check(server, images, tmp_path / "misaligned-1", Shard(1, 2))
    check(server, images, tmp_path / "opencv-1", Shard(1, 2), spec=None, target=Target(pipeline="opencv"))
    merged = merge([tmp_path / "aligned-0", tmp_path / "aligned-1"], tmp_path / "merged")
    assert merged.exit_status() == 0 and merged.report.summary.images == 5
    with pytest.raises(UsageError, match=r"shard 1/2 .*misaligned-1.* is not the same run as shard 0/2 .*: "
                                         r"reference\.recipe: 'opencv: .*' vs 'torchvision: "):
        merge([tmp_path / "aligned-0", tmp_path / "misaligned-1"], tmp_path / "m")
    with pytest.raises(UsageError, match=r"is not the same run .*: deployment\..*'dali' vs 'opencv'"):
        merge([tmp_path / "aligned-0", tmp_path / "opencv-1"], tmp_path / "m")
    (images / "pic1.png").write_bytes((PROJECT_ROOT / "data" / "photos" / "baboon.jpg").read_bytes())
    check(server, images, tmp_path / "more-1", Shard(1, 2), spec=None)
    with pytest.raises(UsageError, match="split another image listing"):
        merge([tmp_path / "aligned-0", tmp_path / "more-1"], tmp_path / "m")


def test_a_discovered_ensembles_replay_is_summed_over_the_shards(server, photos_dir, tmp_path):
    """--model: the ensemble is replayed step by step; the report says on how many images."""
    images = tmp_path / "images"
    images.mkdir()
    for name in ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg", "messi5.jpg"):
        shutil.copyfile(photos_dir / name, images / name)
    target = Target(model="classify_dali")
    whole = check(server, images, tmp_path / "whole", spec=None, target=target)
    for k in range(2):
        check(server, images, tmp_path / f"shard-{k}", Shard(k, 2), spec=None, target=target)
    merged = merge([tmp_path / "shard-0", tmp_path / "shard-1"], tmp_path / "merged")
    one, joined = json.loads(whole.paths["json"].read_text()), json.loads(merged.paths["json"].read_text())
    assert comparable(joined) == comparable(one)
    assert joined["deployed"]["deployment"]["replay"]["images"] == 5
    assert any("reproduced the ensemble's scores on all 5 images" in line for line in joined["deployed"]["deployment"]["found"])


def test_the_command_line_shards_and_merges(server, photos_dir, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg"):
        shutil.copyfile(photos_dir / name, images / name)
    for k in range(4):  # more shards than some hold images: an empty shard is a shard too
        done = harness("check", images, "--url", server.grpc_url, "--shard", f"{k}/4", "--report", tmp_path / f"s{k}")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"s{k}" / SHARD_FILENAME).is_file()
    done = harness("merge", *(tmp_path / f"s{k}" for k in range(4)), "--report", tmp_path / "m")
    assert done.returncode == 0, done.stderr
    assert "merged 4 shards" in done.stderr and json.loads((tmp_path / "m" / "report.json").read_text())["compared"] == 3
    refused = harness("merge", tmp_path / "s0", "--report", tmp_path / "m2")
    assert refused.returncode == 2 and "missing: merging needs all 4" in refused.stderr
    bad = harness("check", images, "--shard", "4/4")
    assert bad.returncode == 2 and "--shard takes K/N with 0 <= K < N" in bad.stderr


def test_a_shard_is_a_stable_hash_of_the_file_name():
    names = [f"img_{i:05d}.jpg" for i in range(3000)]
    paths = [Path("/somewhere") / n for n in names]
    shards = [Shard(k, 3).select(paths) for k in range(3)]
    assert sorted(p.name for s in shards for p in s) == names  # each image in exactly one shard
    assert all(900 < len(s) < 1100 for s in shards)  # about a third each
    # the same split elsewhere, and whatever else is listed: adding images moves none
    moved = [Shard(k, 3).select([Path("/elsewhere") / n for n in [*names, "new.jpg"]]) for k in range(3)]
    assert [[p.name for p in s if p.name != "new.jpg"] for s in moved] == [[p.name for p in s] for s in shards]
    # known values: the split never changes between releases (shards of an older run still merge)
    assert [[k for k in range(n) if Shard(k, n).holds(name)] for name in ("baboon.jpg", "fruits.jpg", "img_00000.jpg")
            for n in (3, 4)] == [[2], [2], [2], [0], [0], [1]]
    assert Shard.parse("2/3") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    for text in ("3/3", "-1/3", "1", "a/b", "1/0"):
        with pytest.raises(UsageError, match="--shard takes K/N"):
            Shard.parse(text)


def test_accuracy_shards_pooled_are_the_report_of_one_run(server, tmp_path):
    """12 labeled ImageNet photos (and a row whose file is missing) scored in 3 shards, pooled:
    every statistic of accuracy.json is the one run's, McNemar and the macro averages included."""
    from harness.accuracy.job import AccuracyOptions
    from harness.accuracy.job import run as run_accuracy
    from harness.merge import merge_accuracy

    source = IMAGENET_SAMPLE
    rows = (source / "labels.csv").read_text().splitlines()[1:13]
    for row in rows:
        shutil.copyfile(source / row.split(",")[0], tmp_path / Path(row.split(",")[0]).name)
    labels = tmp_path / "labels.csv"
    labels.write_text("file,label\n" + "".join(f"{Path(r.split(',')[0]).name},{r.split(',')[1]}\n" for r in rows)
                      + "missing.jpg,3\n")
    session = Session(url=server.grpc_url, spec_file=MISALIGNED)

    def accuracy(report: Path, shard: Shard | None = None):
        return run_accuracy(session, AccuracyOptions(labels, report, shard=shard))

    whole = accuracy(tmp_path / "whole")
    for k in range(3):
        accuracy(tmp_path / f"shard-{k}", Shard(k, 3))
    merged = merge_accuracy([tmp_path / f"shard-{k}" for k in range(3)], tmp_path / "merged")
    one, pooled = json.loads(whole.json_path.read_text()), json.loads(merged.json_path.read_text())
    assert comparable(pooled) == comparable(one)
    assert one["dataset"]["images"] == 13 and one["dataset"]["failed"] == 1
    assert {p["path"] for p in one["effect"]["paths"]} == {"reference", "dali", "opencv"}
    assert merged.exit_status() == whole.exit_status()
    assert merged.markdown_path.read_text() == whole.markdown_path.read_text()
    # A shard written before the one layout (classification's scores at the top level) pools the same.
    from tests.accuracy.test_one_path import old_layout

    shard = tmp_path / "shard-1" / "accuracy.json"
    shard.write_text(json.dumps(old_layout(json.loads(shard.read_text()))))
    again = merge_accuracy([tmp_path / f"shard-{k}" for k in range(3)], tmp_path / "merged-old")
    assert comparable(json.loads(again.json_path.read_text())) == comparable(one)
    with pytest.raises(UsageError, match="shard 1/3 missing"):
        merge_accuracy([tmp_path / "shard-0", tmp_path / "shard-2"], tmp_path / "m")
